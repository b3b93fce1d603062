//! F25: suspicion before timeout, against scripted fake controllers. A late reply makes the
//! loop ask another controller whether the primary changed; only a new primary, named by a
//! controller that answered, abandons the late request.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Endpoint, Options};
use xce::testing::{Connection, WakeState};
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;
use common::{late, names_after};

fn watchful() -> Options {
    Options {
        reply_timeout: Duration::from_secs(5),
        suspicion: true,
        ..fast_options()
    }
}

fn client(masters: &[Endpoint], options: Options) -> Client {
    Client::start_with(Config::new(masters.to_vec()), options, fast_retry(3)).expect("start")
}

/// The primary goes silent (a blackhole: no RST); another controller names the new primary:
/// the call is re-sent there long before the 5 s reply timeout, and a write keeps its request
/// id (exactly once, F16).
#[test]
fn a_silent_primary_is_left_once_another_controller_names_a_new_one() {
    let p = FakeController::start(vec![Step::Silent; 10]);
    let n = FakeController::start(vec![]);
    let s = FakeController::start(vec![]);
    // The standby holds waitPrimary a little (an election), then names n.
    let names_n = names_after(
        Duration::from_millis(200),
        n.endpoint(),
        Step::Standby(Some(n.endpoint())),
    );
    s.push(vec![names_n; 10]);
    n.push(vec![Step::wait_names(n.endpoint(), Step::Ok); 10]);
    let c = client(&[p.endpoint(), s.endpoint(), n.endpoint()], watchful());
    let (id, took) = common::timed(|| c.jobsubmit(spec()).expect("re-sent to the new primary"));
    assert!(took < Duration::from_secs(3), "{took:?}");
    let st = c.stats();
    assert_eq!((st.suspicions, st.suspicion_failovers), (1, 1), "{st:?}");
    let on_p = p.requests();
    let on_n: Vec<Request> = n
        .requests()
        .into_iter()
        .filter(|r| matches!(r.op, Op::JobSubmit(_)))
        .collect();
    assert_eq!(on_p.len(), 1);
    assert_eq!(on_n.len(), 1);
    assert_eq!(on_p[0].request_id, on_n[0].request_id, "same request id");
    assert!(matches!(&on_n[0].op, Op::JobSubmit(j) if j.job_id == id));
    // The next call stays on the new primary.
    c.hello().unwrap();
    assert_eq!(p.requests().len(), 1);
}

/// A slow but healthy primary: the probe of the standby finds no other primary, and the reply
/// is read as soon as it arrives — no failover, no extra delay.
#[test]
fn a_slow_healthy_primary_is_not_left() {
    let p = FakeController::start(vec![late(Duration::from_millis(900), Step::Ok)]);
    let s = FakeController::start(vec![]);
    // The standby knows no primary other than p: it holds waitPrimary (past the reply).
    s.push(vec![names_after(
        Duration::from_secs(3),
        p.endpoint(),
        Step::Ok,
    )]);
    let c = client(&[p.endpoint(), s.endpoint()], watchful());
    let (_, took) = common::timed(|| c.hello().expect("the slow reply"));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    let st = c.stats();
    assert_eq!((st.suspicions, st.suspicion_failovers), (1, 0), "{st:?}");
    assert_eq!(st.rotations, 0);
}

/// Replies on time cost nothing: no probe, no connection to another controller.
#[test]
fn no_probe_while_replies_are_on_time() {
    let p = FakeController::start(vec![]);
    let s = FakeController::start(vec![]);
    let c = client(&[p.endpoint(), s.endpoint()], watchful());
    for _ in 0..50 {
        c.hello().unwrap();
        c.joblist(JobFilter::default()).unwrap();
    }
    assert_eq!(c.stats().suspicions, 0);
    assert_eq!(s.connections(), 0);
}

/// A host whose connect never completes: a listener whose accept queue is full (the kernel
/// drops further SYNs, as a blackholed host would).
struct Unanswering {
    listener: TcpListener,
    _queued: Vec<TcpStream>,
}

impl Unanswering {
    fn new() -> Unanswering {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen(2) on a socket we own, backlog 0.
        unsafe { libc::listen(listener.as_raw_fd(), 0) };
        let addr = listener.local_addr().unwrap();
        let mut queued = vec![];
        for _ in 0..4 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                Ok(s) => queued.push(s),
                Err(_) => break,
            }
        }
        Unanswering {
            listener,
            _queued: queued,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap()
    }
}

/// Racing connects: a silent host first in the list costs nothing when the next one answers.
#[test]
fn a_connect_race_does_not_wait_for_a_silent_host() {
    let silent = Unanswering::new();
    let good = TcpListener::bind("127.0.0.1:0").unwrap();
    let wake = WakeState::new();
    let (sa, ga) = ([silent.addr()], [good.local_addr().unwrap()]);
    let hosts: [(&str, &[SocketAddr]); 2] = [("127.0.0.1", &sa), ("127.0.0.1", &ga)];
    let t = Instant::now();
    let (winner, _conn) = Connection::connect_race(
        &hosts,
        Duration::from_millis(100),
        None,
        Limits::default(),
        Instant::now() + Duration::from_secs(10),
        &wake.waker_now(),
    )
    .expect("the answering host");
    assert_eq!(winner, 1);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Alone, the silent host runs into the deadline.
    let r = Connection::connect_race(
        &hosts[..1],
        Duration::ZERO,
        None,
        Limits::default(),
        Instant::now() + Duration::from_millis(300),
        &wake.waker_now(),
    );
    assert_eq!(r.err(), Some(xce::Error::Errno(libc::ETIMEDOUT)));
}

/// Only another primary counts: a standby that names the late primary itself is no news
/// (with forwarding off; on, the request also goes through that standby, F28: below).
#[test]
fn a_probe_naming_the_late_primary_is_no_news() {
    let p = FakeController::start(vec![late(Duration::from_millis(700), Step::Ok)]);
    let s = FakeController::start(vec![]);
    s.push(vec![Step::wait_names(p.endpoint(), Step::Ok); 4]);
    let opts = Options {
        forward: false,
        ..watchful()
    };
    let c = client(&[p.endpoint(), s.endpoint()], opts);
    c.hello().expect("the late reply");
    let st = c.stats();
    assert_eq!((st.suspicions, st.suspicion_failovers), (1, 0), "{st:?}");
}

/// F2 with F25: `start` does not wait out the connect timeout of a silent first master when
/// the next one answers; the first call goes to the one that answered.
#[test]
fn start_does_not_wait_for_a_silent_master() {
    let silent = Unanswering::new();
    let good = FakeController::start(vec![]);
    let opts = Options {
        connect_timeout: Duration::from_secs(5),
        ..watchful()
    };
    let masters = [
        Endpoint::new("127.0.0.1", silent.addr().port()),
        good.endpoint(),
    ];
    let t = Instant::now();
    let c = client(&masters, opts);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    c.hello().unwrap();
    assert_eq!(good.ops(), vec!["hello"]);
}

/// F25 + F28: the standby that names a new primary the client cannot reach (its connect never
/// completes) carries the late request at once, on the probe's own connection, marked for
/// forwarding, with the write's request id — not after a connect to the silent primary given
/// up at the race stagger (200 ms) and a second connection to the same standby.
#[test]
fn a_silent_new_primary_is_reached_through_the_standby_that_named_it() {
    let p = FakeController::start(vec![Step::Silent; 4]);
    let n = Unanswering::new();
    let n_ep = Endpoint::new("127.0.0.1", n.addr().port());
    // The standby names n and answers every other op as the forwarded primary would.
    let s = FakeController::start(vec![Step::wait_names(n_ep.clone(), Step::Ok); 10]);
    let c = client(&[p.endpoint(), s.endpoint(), n_ep], watchful());
    let (_, took) = common::timed(|| c.jobsubmit(spec()).expect("served through the standby"));
    let st = c.stats();
    assert_eq!((st.suspicions, st.suspicion_failovers), (1, 1), "{st:?}");
    assert_eq!(
        s.connections(),
        1,
        "the probe's connection carried the call"
    );
    sent_once_then_forwarded(&p, &s);
    // The suspicion floor (300 ms) and little more; the connect path took ≥ 500 ms.
    assert!(took < Duration::from_millis(450), "{took:?}");
    // The next calls stay on the standby's connection.
    c.hello().unwrap();
    assert_eq!(s.connections(), 1);
}

/// F28 off by option: the standby that named the silent new primary is not asked to forward;
/// the loop connects to the named primary as before (raced past it after the stagger, to the
/// standby again), and no request is marked.
#[test]
fn with_forwarding_off_the_named_primary_is_connected_to_as_before() {
    let p = FakeController::start(vec![Step::Silent; 4]);
    let n = Unanswering::new();
    let n_ep = Endpoint::new("127.0.0.1", n.addr().port());
    let s = FakeController::start(vec![Step::wait_names(n_ep.clone(), Step::Ok); 10]);
    let opts = Options {
        forward: false,
        ..watchful()
    };
    let c = client(&[p.endpoint(), s.endpoint(), n_ep], opts);
    c.jobsubmit(spec()).expect("answered by the (fake) standby");
    assert_eq!(s.connections(), 2, "the probe's connection was not reused");
    assert!(
        s.requests().iter().all(|r| r.forward_within_ms == 0),
        "a request was marked with forwarding off"
    );
}

/// F28: the primary's reply is late and the standby asked vouches for that very primary (its
/// appends arrive there): this client's way to it is what fails. The same request (same
/// request id) goes through the standby at once, marked for forwarding, while the direct one
/// stays outstanding; the standby's answer (the primary's, forwarded) is taken — at the
/// suspicion threshold, not at the 5 s reply timeout — and the next calls go through it.
#[test]
fn a_late_request_goes_through_a_standby_that_vouches_for_the_primary() {
    let p = FakeController::start(vec![Step::Silent; 4]);
    let s = FakeController::start(vec![Step::wait_names(p.endpoint(), Step::Ok); 10]);
    let c = client(&[p.endpoint(), s.endpoint()], watchful());
    let (_, took) = common::timed(|| c.jobsubmit(spec()).expect("answered through the standby"));
    assert!(took < Duration::from_millis(1000), "{took:?}");
    sent_once_then_forwarded(&p, &s);
    let st = c.stats();
    assert_eq!(st.current_master, Some(s.endpoint()), "{st:?}");
    c.hello().unwrap();
    assert_eq!(
        s.connections(),
        1,
        "the probe's connection carries the calls"
    );
}

/// F28: the submit reached the late controller `p` once and the standby `s` once, with the
/// same request id (the primary applies it once), marked for forwarding on `s`.
fn sent_once_then_forwarded(p: &FakeController, s: &FakeController) {
    let on_p = p.requests();
    let on_s: Vec<Request> = s
        .requests()
        .into_iter()
        .filter(|r| matches!(r.op, Op::JobSubmit(_)))
        .collect();
    assert_eq!((on_p.len(), on_s.len()), (1, 1), "{:?}", s.ops());
    assert_eq!(on_p[0].request_id, on_s[0].request_id, "same request id");
    assert!(on_s[0].forward_within_ms > 0, "not marked for forwarding");
}
