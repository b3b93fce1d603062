//! P2: what a call costs the library when nothing fails — the failover loop on a kept
//! connection to the primary, with the defaults a daemon runs with (suspicion on, members
//! learned, three masters in rotation). Counted, not timed: the identity syscalls of F21/F26
//! (`getpid`, `fstat`) and the heap allocations of the calling thread, per call, against the
//! same exchange made bare on the library's own `transport::Connection`.

use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Endpoint, Options};
use xce::testing::identity_syscalls;
use xce::testing::{Connection, WakeState};
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;
mod counting_alloc;

/// What `n` runs of `f` cost this thread: (getpid, fstat, allocations) per run.
fn per_call(n: u64, mut f: impl FnMut()) -> (f64, f64, f64) {
    let (p0, s0) = identity_syscalls();
    let a0 = counting_alloc::allocations();
    for _ in 0..n {
        f();
    }
    let (p1, s1) = identity_syscalls();
    let a1 = counting_alloc::allocations();
    let per = |d: u64| d as f64 / n as f64;
    (per(p1 - p0), per(s1 - s0), per(a1 - a0))
}

/// The primary's `hello` answer as a real controller gives it: itself the primary, three
/// members (itself and two others), stamped with its membership version (F29).
fn primary_info(me: &Endpoint, others: &[Endpoint]) -> ReplyData {
    let members = common::members(&[std::slice::from_ref(me), others].concat());
    ReplyData::CtrlInfo(ControllerInfo {
        id: 1,
        role: ControllerRole::Primary,
        primary_id: 1,
        primary_host: me.host.clone(),
        primary_port: me.port,
        version: "0.1.0".into(),
        protocol_version: PROTOCOL_VERSION,
        members,
        ..Default::default()
    })
}

const VERSION: u64 = 7;
const CALLS: u64 = 50;

/// A fake primary whose first `hellos` answers are the primary's `hello` answer and the rest
/// the answer each op expects, all stamped with its membership version; and a context on it
/// with the defaults, its members learned (three masters in rotation) by its first call.
fn primary_and_client(hellos: u64) -> (FakeController, Client) {
    let fake = FakeController::start(vec![]);
    let others = [refused_endpoint(), refused_endpoint()];
    let info = primary_info(&fake.endpoint(), &others);
    // Each answer 1 ms late, so that every call waits for its reply once (a call that finds
    // it already there waits not at all, which only lowers the counts).
    let late = |s: Step| Step::After(Duration::from_millis(1), Box::new(s));
    fake.push((0..hellos).map(|_| late(Step::Versioned(VERSION, Some(info.clone())))));
    fake.push((0..4 * CALLS).map(|_| late(Step::Versioned(VERSION, None))));
    let opts = Options {
        reply_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let c =
        Client::start_with(Config::new(vec![fake.endpoint()]), opts, fast_retry(3)).expect("start");
    c.hello().expect("first hello");
    assert_eq!(c.masters().len(), 3, "the members were learned");
    (fake, c)
}

/// The same `hello` as one bare exchange on a kept connection of the transport.
struct Bare {
    conn: Connection,
    wake: WakeState,
    seq: u64,
}

impl Bare {
    fn connect(to: &Endpoint) -> Bare {
        let wake = WakeState::new();
        let conn = Connection::connect(
            &to.host,
            to.port,
            None,
            Limits::default(),
            Instant::now() + Duration::from_secs(5),
            &wake.waker_now(),
        )
        .expect("connect");
        Bare { conn, wake, seq: 0 }
    }

    fn hello(&mut self) {
        self.seq += 1;
        let req = Request {
            seq: self.seq,
            client_id: [7; 16],
            request_id: 0,
            no_reply: false,
            op: Op::Hello(Hello {
                client_name: "happy".into(),
                protocol_version: PROTOCOL_VERSION,
            }),
            auth_token: String::new(),
            forward_within_ms: 0,
        };
        let until = Instant::now() + Duration::from_secs(5);
        assert!(self.conn.usable());
        let waker = self.wake.waker_now();
        self.conn.send(&req, until, &waker).expect("send");
        let r = self.conn.recv(self.seq, until, &waker).expect("recv");
        assert!(r.status >= 0);
    }
}

#[test]
fn a_call_reads_the_process_id_once() {
    let (_fake, c) = primary_and_client(1 + 10 + CALLS);
    for _ in 0..10 {
        c.hello().expect("warm-up hello");
    }
    let (getpid, fstat, _) = per_call(CALLS, || {
        c.hello().expect("hello");
    });
    // F26's generation, the socket's identity (F21) and each end of the wait's pipe all
    // compare with the one id read when the call began.
    assert!(getpid <= 1.0, "hello: getpid per call: {getpid}");
    // The socket once per attempt, the wake pipe's two ends once per wait.
    assert!(fstat <= 3.0, "hello: fstat per call: {fstat}");
    let (getpid, fstat, _) = per_call(CALLS, || {
        c.jobinfo(5).expect("jobinfo");
    });
    assert!(getpid <= 1.0, "jobinfo: getpid per call: {getpid}");
    assert!(fstat <= 3.0, "jobinfo: fstat per call: {fstat}");
}

/// F29 on the happy path: a caller's own `hello` on a kept connection, stamped with the
/// membership version whose members it learned, does not walk (and copy) the member list again.
#[test]
fn a_hello_allocates_no_more_than_a_bare_one() {
    let (fake, c) = primary_and_client(1 + 10 + 2 * CALLS);
    let mut bare = Bare::connect(&fake.endpoint());
    for _ in 0..10 {
        c.hello().expect("warm-up hello");
    }
    let (_, _, looped) = per_call(CALLS, || {
        c.hello().expect("hello");
    });
    let (_, _, alone) = per_call(CALLS, || bare.hello());
    assert!(
        looped <= alone,
        "allocations per hello: {looped} through the loop, {alone} bare"
    );
}
