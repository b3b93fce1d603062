//! F29: the masters list follows the cluster, against scripted fake controllers. Members are
//! learned only from the answer of the node the context talks to, when it says it is the
//! primary — never from a standby's answer, a node speaking of another primary, or a hint; the
//! configured masters are never dropped; the learned ones are bounded; the happy path pays
//! nothing (one `hello` per new connection, none per call).

use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Endpoint, Options, MAX_LEARNED_MASTERS};
use xce_proto::wire::*;
use xce_testkit::fake::*;

mod common;

fn learning() -> Options {
    Options {
        learn_masters: true,
        ..fast_options()
    }
}

fn learner(masters: &[Endpoint]) -> Client {
    Client::start_with(Config::new(masters.to_vec()), learning(), fast_retry(3)).expect("start")
}

/// A `hello` answer of node `id`, in `role`, naming `primary_id`, with `members`.
fn info(id: u32, role: ControllerRole, primary_id: u32, members: &[Endpoint]) -> Step {
    Step::Payload(ReplyData::CtrlInfo(ControllerInfo {
        id,
        role,
        primary_id,
        members: common::members(members),
        ..Default::default()
    }))
}

fn primary_says(members: &[Endpoint]) -> Step {
    info(1, ControllerRole::Primary, 1, members)
}

#[test]
fn members_are_learned_from_the_primary_once_per_connection() {
    let p = FakeController::start(vec![]);
    let (x, y) = (refused_endpoint(), refused_endpoint());
    p.push([primary_says(&[p.endpoint(), x.clone(), y.clone()])]);
    let c = learner(&[p.endpoint()]);
    assert_eq!(c.masters(), vec![p.endpoint()]);
    c.clusterconf().expect("clusterconf");
    assert_eq!(p.ops(), vec!["hello", "clusterconf"]);
    assert_eq!(c.masters(), vec![p.endpoint(), x.clone(), y.clone()]);
    assert_eq!(c.configured_masters(), &[p.endpoint()]);
    let s = c.stats();
    assert_eq!(s.learned_masters, 2);
    assert_eq!(*s.masters, vec![p.endpoint(), x, y]);
    // The happy path: no further `hello`, whatever the number of calls.
    for _ in 0..100 {
        c.clusterconf().expect("clusterconf");
    }
    assert_eq!(p.requests().len(), 2 + 100);
    assert_eq!(p.connections(), 1);
    // The caller's own `hello` on the primary teaches too.
    p.push([primary_says(&[p.endpoint(), refused_endpoint()])]);
    c.hello().expect("hello");
    assert_eq!(
        c.stats().learned_masters,
        3,
        "a new member in the caller's own hello"
    );
    assert_eq!(p.requests().len(), 2 + 100 + 1);
}

/// The primary's `hello` answer naming `members`, stamped with membership version `v`.
fn hello_v(v: u64, members: &[Endpoint]) -> Step {
    let Step::Payload(d) = primary_says(members) else {
        unreachable!()
    };
    Step::Versioned(v, Some(d))
}

/// A context that keeps its connection asks again when the primary's replies carry another
/// membership version (a member added while it stays on that primary, C17): one `hello` per
/// change, none per call; the stamp alone teaches nothing.
#[test]
fn a_new_membership_version_asks_again_once_per_change() {
    let p = FakeController::start(vec![]);
    let (x, y) = (refused_endpoint(), refused_endpoint());
    p.push([
        hello_v(5, &[p.endpoint(), x.clone()]),
        Step::Versioned(5, None),
        Step::Versioned(5, None),
        Step::Versioned(6, None), // the membership changed; this reply says so
        hello_v(6, &[p.endpoint(), x.clone(), y.clone()]),
        Step::Versioned(6, None),
        Step::Versioned(6, None),
        Step::Versioned(6, None),
    ]);
    let c = learner(&[p.endpoint()]);
    for _ in 0..3 {
        c.clusterconf().expect("clusterconf");
    }
    assert_eq!(
        c.masters(),
        vec![p.endpoint(), x.clone()],
        "a stamp teaches nothing"
    );
    for _ in 0..3 {
        c.clusterconf().expect("clusterconf");
    }
    let (h, cc) = ("hello", "clusterconf");
    assert_eq!(p.ops(), [h, cc, cc, cc, h, cc, cc, cc]);
    assert_eq!(c.masters(), vec![p.endpoint(), x, y]);
    assert_eq!(p.connections(), 1);
}

/// The same for a context that only sends notifications (a worker's heartbeats, F12): an
/// acknowledgement stamped with another version makes the next notification ask first.
#[test]
fn notifications_follow_the_membership_version_too() {
    let p = FakeController::start(vec![]);
    let (x, y) = (refused_endpoint(), refused_endpoint());
    p.push([
        hello_v(5, &[p.endpoint(), x.clone()]),
        Step::Versioned(5, None),
        Step::Versioned(6, None), // acknowledged by a primary whose membership changed
        hello_v(6, &[p.endpoint(), x.clone(), y.clone()]),
        Step::Versioned(6, None),
    ]);
    let c = learner(&[p.endpoint()]);
    for _ in 0..3 {
        c.heartbeat("h1").expect("heartbeat");
        c.flush(Duration::from_secs(2)).expect("acknowledged");
    }
    assert_eq!(
        p.ops(),
        vec!["hello", "heartbeat", "heartbeat", "hello", "heartbeat"]
    );
    assert_eq!(c.masters(), vec![p.endpoint(), x, y]);
    assert_eq!(p.connections(), 1);
}

/// P2: the caller's own `hello`s on one connection walk the member list once per membership
/// version. A list newer than its stamp (the membership changed between the controller's
/// reading of the version and of the members) is not missed: the next reply carries the new
/// version, and the `hello` it makes due teaches the new member.
#[test]
fn a_hello_stamped_with_a_version_learned_teaches_nothing_new() {
    let p = FakeController::start(vec![]);
    let (x, y) = (refused_endpoint(), refused_endpoint());
    p.push([
        hello_v(5, &[p.endpoint(), x.clone()]),
        hello_v(5, &[p.endpoint(), x.clone()]),
        hello_v(5, &[p.endpoint(), x.clone(), y.clone()]), // read after a change
        Step::Versioned(6, None),
        hello_v(6, &[p.endpoint(), x.clone(), y.clone()]),
        Step::Versioned(6, None),
    ]);
    let c = learner(&[p.endpoint()]);
    for _ in 0..3 {
        c.hello().expect("hello");
    }
    assert_eq!(
        c.masters(),
        vec![p.endpoint(), x.clone()],
        "version 5 learned"
    );
    c.clusterconf().expect("clusterconf"); // stamped 6
    c.clusterconf().expect("clusterconf"); // asks first
    let (h, cc) = ("hello", "clusterconf");
    assert_eq!(p.ops(), [h, h, h, cc, h, cc]);
    assert_eq!(c.masters(), vec![p.endpoint(), x, y]);
    assert_eq!(p.connections(), 1);
}

/// A first call that is a `hello` asks for the members with its own request: no second one.
#[test]
fn a_hello_call_is_its_own_members_question() {
    let x = refused_endpoint();
    let p = FakeController::start(vec![]);
    p.push([primary_says(&[p.endpoint(), x.clone()])]);
    let c = learner(&[p.endpoint()]);
    c.hello().expect("hello");
    assert_eq!(p.ops(), vec!["hello"]);
    assert_eq!(c.masters(), vec![p.endpoint(), x]);
    c.clusterconf().expect("clusterconf");
    assert_eq!(p.ops(), vec!["hello", "clusterconf"]);
}

#[test]
fn nothing_is_learned_from_a_standby_or_a_node_naming_another_primary() {
    let z = [refused_endpoint()];
    // A standby answering `hello` with success (as an older or buggy node might) and members.
    let s = FakeController::start(vec![info(2, ControllerRole::Standby, 1, &z)]);
    let c = learner(&[s.endpoint()]);
    c.clusterconf().expect("clusterconf");
    assert_eq!(c.masters(), vec![s.endpoint()]);
    // A node calling itself primary while naming another one as the primary.
    let w = FakeController::start(vec![info(2, ControllerRole::Primary, 1, &z)]);
    let c = learner(&[w.endpoint()]);
    c.clusterconf().expect("clusterconf");
    assert_eq!(c.masters(), vec![w.endpoint()]);
    // A standby refusing with a hint to an unconfigured host: the hint is no member.
    let a = FakeController::start(vec![Step::Standby(Some(z[0].clone()))]);
    let b = FakeController::start(vec![primary_says(&[])]);
    let c = learner(&[a.endpoint(), b.endpoint()]);
    c.clusterconf().expect("clusterconf through b");
    assert_eq!(c.masters(), vec![a.endpoint(), b.endpoint()]);
    assert_eq!(c.stats().learned_masters, 0);
}

#[test]
fn configured_masters_stay_first_and_the_learned_are_bounded() {
    let p = FakeController::start(vec![]);
    let other = refused_endpoint();
    // The primary forgets both configured masters and reports far too many members.
    let many: Vec<Endpoint> = (0..3 * MAX_LEARNED_MASTERS as u16)
        .map(|k| Endpoint::new("127.0.0.1", 1 + k))
        .collect();
    p.push([primary_says(&many)]);
    let c = learner(&[p.endpoint(), other.clone()]);
    c.clusterconf().expect("clusterconf");
    let m = c.masters();
    assert_eq!(m.len(), 2 + MAX_LEARNED_MASTERS);
    assert_eq!(&m[..2], &[p.endpoint(), other]);
    assert_eq!(&m[2..], &many[..MAX_LEARNED_MASTERS]);
}

/// The daemon with an old list: configured with one master only, it learned the others; that
/// master dies for good; the next calls go to a learned master with no error to the caller.
#[test]
fn a_learned_master_takes_over_when_the_configured_one_dies() {
    let q = FakeController::start(vec![]);
    let p = FakeController::start(vec![]);
    p.push([primary_says(&[p.endpoint(), q.endpoint()])]);
    q.push([info(2, ControllerRole::Primary, 2, &[q.endpoint()])]);
    let c = learner(&[p.endpoint()]);
    c.clusterconf().expect("first call");
    assert_eq!(c.masters(), vec![p.endpoint(), q.endpoint()]);
    let p_ep = p.endpoint();
    drop(p);
    let t0 = Instant::now();
    for _ in 0..5 {
        c.clusterconf().expect("through the learned master");
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(q.ops()[..2], ["hello", "clusterconf"]);
    assert_eq!(c.stats().current_master, Some(q.endpoint()));
    // The configured master is still in the list, first.
    assert_eq!(c.masters(), vec![p_ep, q.endpoint()]);
}

/// A connection whose `hello` answer is "standby" is the attempt's outcome: the op itself is
/// not sent there, and the loop moves on to the primary named by a configured hint.
#[test]
fn a_standby_answer_to_the_members_hello_moves_the_call_on() {
    let b = FakeController::start(vec![primary_says(&[])]);
    let a = FakeController::start(vec![Step::Standby(Some(b.endpoint()))]);
    let c = learner(&[a.endpoint(), b.endpoint()]);
    c.jobsubmit(spec()).expect("submitted at b");
    assert_eq!(a.ops(), vec!["hello"]);
    assert_eq!(b.ops(), vec!["hello", "jobsubmit"]);
}

/// A `waitPrimary` witness that names itself primary and reports members, on its own
/// connection during a backoff, teaches nothing: only the connection the call is served on.
#[test]
fn nothing_is_learned_from_a_wait_primary_witness() {
    let z = refused_endpoint();
    let not_ready = Step::Status(-xce_proto::error::E_XCE_NOT_READY);
    let a = FakeController::start(vec![not_ready.clone(); 20]);
    let b = FakeController::start(vec![]);
    let witness = info(2, ControllerRole::Primary, 2, std::slice::from_ref(&z));
    let served = info(2, ControllerRole::Primary, 2, &[]);
    // b's first `hello` is refused (so the loop backs off and asks a witness), its later ones
    // served; its `waitPrimary` answers name itself and report z.
    b.push([Step::Split(Box::new(witness.clone()), Box::new(not_ready))]);
    b.push(vec![Step::Split(Box::new(witness), Box::new(served)); 4]);
    let opts = Options {
        wait_primary: true,
        ..learning()
    };
    let c = client(&[a.endpoint(), b.endpoint()], opts, fast_retry(3));
    c.hello().expect("hello served by b");
    assert!(
        b.ops().contains(&"waitPrimary"),
        "b was a witness: {:?}",
        b.ops()
    );
    assert_eq!(c.masters(), vec![a.endpoint(), b.endpoint()]);
}

/// F14/F29: each master learned is one INFO line naming it and the primary; the same members
/// reported again log nothing.
#[test]
fn each_master_learned_is_logged_once_at_info() {
    use xce::client::log::Level;
    let lines = common::captured_log(Level::Info);
    let x = refused_endpoint();
    let p = FakeController::start(vec![]);
    let members = [p.endpoint(), x.clone()];
    p.push([primary_says(&members), primary_says(&members)]);
    let c = learner(&[p.endpoint()]);
    c.hello().expect("hello");
    c.hello().expect("hello again");
    let want = format!("masters: learned {x} from the primary {}", p.endpoint());
    let seen: Vec<_> = lines
        .lock()
        .iter()
        .filter(|(_, l)| l.contains(&want))
        .cloned()
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, Level::Info);
}
