//! S9, the hostile peer: a scripted fake controller (shared with the library's loop tests)
//! answers with garbage, truncated frames, an absurd length prefix, wrong seqs, redirects to
//! hosts that are not configured masters, redirects with an empty host or port 0, a flood of
//! redirects between two standbys, or closes mid-reply. The client returns a clear error or
//! fails over — never crashes, hangs or allocates the claimed size — and the context stays
//! usable.

use std::time::{Duration, Instant};

use xce::client::Endpoint;
use xce::client::{Client, Config};
use xce::Error;
use xce_proto::wire::JobFilter;
use xce_testkit::fake::*;

/// Every call here must end well inside this (reply timeouts are 300 ms in `fast_options`).
const CALL_BOUND: Duration = Duration::from_secs(5);

fn client_over(masters: Vec<Endpoint>, retries: u32) -> Client {
    Client::start_with(Config::new(masters), fast_options(), fast_retry(retries)).expect("start")
}

/// One hostile first answer on master A, a good master B behind it: the call fails over to B
/// (or, for wrong seqs, waits them out on A), and the same context keeps working.
#[test]
fn s9_hostile_answers_fail_over_and_leave_the_context_usable() {
    let unlisted = Endpoint::new("127.0.0.99", 9);
    let cases: Vec<(&str, Step)> = vec![
        ("garbage", Step::Garbage),
        ("truncated frame then close", Step::CloseMidReply),
        ("absurd length prefix", Step::Oversized),
        ("a wrong seq, then the right one", Step::WrongSeqFirst),
        ("a flood of wrong seqs", Step::WrongSeqs(40)),
        (
            "redirect to a host that is not a master",
            Step::Redirect(Some(unlisted.clone())),
        ),
        (
            "standby naming a host that is not a master",
            Step::Standby(Some(unlisted)),
        ),
        (
            "redirect with an empty host",
            Step::Redirect(Some(Endpoint::new("", 0))),
        ),
        (
            "redirect to port 0",
            Step::Redirect(Some(Endpoint::new("127.0.0.1", 0))),
        ),
        ("close without a reply", Step::Close),
    ];
    for (what, step) in cases {
        let too_big = matches!(step, Step::Oversized);
        // The first answer (to `start`'s connect, no request) is none; the op meets the step.
        let a = FakeController::start(vec![step]);
        let b = FakeController::start(vec![]);
        let cl = client_over(vec![a.endpoint(), b.endpoint()], 5);
        let t = Instant::now();
        let r = cl.joblist(JobFilter::default());
        let took = t.elapsed();
        assert!(took < CALL_BOUND, "{what}: took {took:?}");
        if too_big {
            // A frame larger than the client's limit would be as large from any master: its own
            // clear error at once, no failover (the listing then asks for pages, which this
            // fake answers with nonsense: a protocol error). Never EINVAL.
            assert!(
                matches!(r, Err(Error::TooBig) | Err(Error::Proto)),
                "{what}: expected a clear error without failover, got {r:?}"
            );
            assert_eq!(b.ops().len(), 0, "{what}: no failover");
        } else {
            assert!(
                r.is_ok(),
                "{what}: expected failover to the good master, got {r:?}"
            );
        }
        // Usable afterwards: more calls succeed.
        cl.hello()
            .unwrap_or_else(|e| panic!("{what}: context unusable after: {e}"));
        cl.joblist(JobFilter::default()).unwrap();
        eprintln!("S9 {what}: failed over in {took:?}");
    }
}

/// Two standbys redirecting to each other forever: the budget ends it with "cluster not
/// ready" — bounded in attempts and time, the process sleeping rather than spinning.
#[test]
fn s9_redirect_flood_between_two_standbys_is_bounded() {
    let a = FakeController::start(vec![]);
    let b = FakeController::start(vec![]);
    a.push(vec![Step::Redirect(Some(b.endpoint())); 200]);
    b.push(vec![Step::Redirect(Some(a.endpoint())); 200]);
    let cl = client_over(vec![a.endpoint(), b.endpoint()], 4);
    let (cpu0, t) = (thread_cpu_time(), Instant::now());
    let r = cl.hello();
    let (cpu, took) = (thread_cpu_time() - cpu0, t.elapsed());
    let attempts = a.requests().len() + b.requests().len();
    eprintln!("S9 redirect flood: {r:?} after {attempts} requests in {took:?}, CPU {cpu:?}");
    assert_eq!(r, Err(Error::NotReady));
    assert!(took < CALL_BOUND);
    assert!(
        attempts <= 4 * 4 + 4,
        "each sleep allows one cycle: {attempts} requests"
    );
    assert!(cpu * 4 < took, "no spin: CPU {cpu:?} of {took:?}");
}

/// Only hostile masters: the call ends with a clear error (never EINVAL, never a hang), and
/// the context recovers when a sane controller appears behind the same address list.
#[test]
fn s9_all_hostile_gives_a_clear_error() {
    let a = FakeController::start(vec![Step::Garbage; 20]);
    let b = FakeController::start(vec![Step::Oversized; 20]);
    let cl = client_over(vec![a.endpoint(), b.endpoint()], 2);
    let t = Instant::now();
    let r = cl.joblist(JobFilter::default());
    assert!(t.elapsed() < CALL_BOUND);
    let e = r.expect_err("nobody answers sanely");
    eprintln!(
        "S9 all hostile: {e} ({})",
        cl.last_error().map(|r| r.to_string()).unwrap_or_default()
    );
    // A's garbage fails over to B, whose oversized frame is final (as large from anyone).
    assert!(
        matches!(e, Error::Proto | Error::TooBig),
        "a clear error, not {e:?}"
    );
    let text = cl.last_error().unwrap().to_string();
    assert!(
        text.contains("protocol error") || text.contains("reply too large"),
        "{text}"
    );
}
