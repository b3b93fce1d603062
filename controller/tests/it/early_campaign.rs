//! C15: a crashed primary is replaced when the leader lease lapses, not a random election
//! timeout later — and never earlier. Slow timings (lease 1.2 s, election 1.0–1.2 s) make the
//! three cases seconds apart, far above the scheduling noise of a loaded machine:
//! - early campaign (the default): the new primary serves after the lease (1.2 s after the
//!   last append) and well before openraft's own timer could fire (≥ 2.2 s after it);
//! - `--early-campaign off` (the behaviour before C15): not before that;
//! - a raft connection that carried the primary's vote closes while the primary lives (a
//!   forged append on a connection of its own, then a close): no election at all.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;

const HEARTBEAT_MS: u64 = 50;
const ELECTION_MIN_MS: u64 = 1000;
const ELECTION_MAX_MS: u64 = 1200;

fn slow(early: &str) -> Vec<String> {
    let [hb, min, max] = [HEARTBEAT_MS, ELECTION_MIN_MS, ELECTION_MAX_MS].map(|n| n.to_string());
    let mut flags = timing(&hb, &min, &max).map(String::from).to_vec();
    flags.extend(["--early-campaign".into(), early.into()]);
    flags
}

/// kill -9 of the settled primary of a 3-node cluster started with `flags`; the time from the
/// kill to a survivor serving as primary, and the cluster.
fn kill_to_primary(flags: &[String]) -> (Duration, Cluster) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut ctrl = cluster(3, &flags);
    let p = ctrl.expect_settled(STARTUP);
    // A few heartbeats after settling: every follower holds a fresh append.
    std::thread::sleep(Duration::from_millis(3 * HEARTBEAT_MS));
    let t0 = Instant::now();
    ctrl.kill(p);
    let rest = ctrl.running();
    let p2 = ctrl.expect_primary_among(&rest, STARTUP);
    let took = t0.elapsed();
    assert_ne!(p2, p);
    (took, ctrl)
}

/// The earliest instant openraft's own timer lets a follower campaign after the kill: the
/// lease plus election-min after the last append (which came a heartbeat before; three, for a
/// heartbeat a loaded machine delayed).
fn openraft_earliest() -> Duration {
    Duration::from_millis(ELECTION_MAX_MS + ELECTION_MIN_MS - 3 * HEARTBEAT_MS)
}

#[test]
fn a_crashed_primary_is_replaced_when_its_lease_lapses() {
    let (took, ctrl) = kill_to_primary(&slow("on"));
    // The lease after the last append, which came a heartbeat before the kill (four, for a
    // heartbeat a loaded machine delayed); a campaign at the close itself would come at once.
    let lease_floor = Duration::from_millis(ELECTION_MAX_MS - 4 * HEARTBEAT_MS);
    assert!(
        took >= lease_floor,
        "a new primary {took:?} after the kill: inside the lease ({lease_floor:?})\n{}",
        ctrl.all_logs()
    );
    assert!(
        took < openraft_earliest() - Duration::from_millis(150),
        "a new primary only {took:?} after the kill: no earlier than openraft's own timer ({:?})\n{}",
        openraft_earliest(),
        ctrl.all_logs()
    );
    assert!(
        ctrl.all_logs()
            .contains("lease lapsed with no append since: campaigning (C15"),
        "{}",
        ctrl.all_logs()
    );
}

#[test]
fn without_the_early_campaign_a_crash_waits_for_the_random_timeout() {
    let (took, ctrl) = kill_to_primary(&slow("off"));
    assert!(
        took >= openraft_earliest(),
        "a new primary {took:?} after the kill with --early-campaign off\n{}",
        ctrl.all_logs()
    );
    assert!(!ctrl.all_logs().contains("(C15"), "{}", ctrl.all_logs());
}

/// A settled cluster on the slow timings (early campaign on), with `extra` flags: its primary,
/// cluster id and term.
fn settled_slow(extra: &[&str]) -> (Cluster, u32, [u8; 16], u64) {
    let mut flags = slow("on");
    flags.extend(extra.iter().map(|f| f.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let ctrl = cluster(3, &flags);
    let p = ctrl.expect_settled(STARTUP);
    let id = ctrl.cluster_id();
    let term = term_of(&ctrl, p);
    (ctrl, p, id, term)
}

/// A raft connection of its own to `node` carrying one forged append of primary `p`'s vote in
/// `term` (cluster `id`), taken by the node.
fn forged_append(ctrl: &Cluster, node: u32, p: u32, term: u64, id: [u8; 16]) -> TcpStream {
    let mut s = TcpStream::connect(ctrl.raft_addr(node)).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let reply = raft_wire::call(&mut s, &raft_wire::append(term, p.into(), false), id).unwrap();
    assert!(
        matches!(reply, raft_wire::RpcReply::Append(Ok(_))),
        "node {node} did not take the append: {reply:?}"
    );
    s
}

/// Every node still in `term` under primary `p` (`why` says what would have changed it).
fn unchanged(ctrl: &Cluster, term: u64, p: u32, why: &str) {
    for id in 1..=3 {
        let i = info(&ctrl.client(id).call(hello()));
        assert_eq!(
            (i.term, i.primary_id),
            (term, p),
            "node {id}{why}\n{}",
            ctrl.all_logs()
        );
    }
}

/// What `unchanged` says when a campaign should have been called off.
const CALLED_OFF: &str = ": a campaign decided before the primary's append went on after it";

/// What node `nodes[i]` logged since now, by `i`.
fn log_since<'a>(ctrl: &'a Cluster, nodes: &'a [u32]) -> impl Fn(usize) -> String + 'a {
    let from: Vec<usize> = nodes.iter().map(|&s| ctrl.log(s).len()).collect();
    move |i| ctrl.log_since(nodes[i], from[i])
}

/// A connection that carried the live primary's appends closes (here: a forged append of its
/// vote on a connection of our own, then a close): the primary's next heartbeat arrives
/// before the lease lapses, so the follower does not campaign.
#[test]
fn a_closed_connection_of_a_live_primary_starts_no_election() {
    let (ctrl, p, id, term) = settled_slow(&[]);
    for f in (1..=3).filter(|&i| i != p) {
        let mut s = forged_append(&ctrl, f, p, term, id);
        s.flush().unwrap();
        drop(s);
    }
    // Past the lease and the longest stagger: the followers would have campaigned by now.
    std::thread::sleep(Duration::from_millis(ELECTION_MAX_MS + 500));
    unchanged(&ctrl, term, p, "");
    assert!(!ctrl.all_logs().contains("(C15"), "{}", ctrl.all_logs());
}

/// C15 (amended): a primary that gives up on a raft connection while it lives (its peer
/// answered none of the last requests: a slow link) says so before it closes (`Bye`); the
/// peer then takes the close for what it is. Forged on connections of their own, after an
/// append of the primary's vote: one follower is told goodbye, the other sees a bare close —
/// only the second counts its close as evidence.
#[test]
fn a_goodbye_before_the_close_is_no_evidence_of_a_crash() {
    let (ctrl, p, id, term) = settled_slow(&[]);
    let f: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    let (told, bare) = (f[0], f[1]);
    for (node, bye) in [(told, true), (bare, false)] {
        let mut s = forged_append(&ctrl, node, p, term, id);
        if bye {
            s.write_all(&raft_wire::frame(&raft_wire::RpcRequest::Bye, id))
                .unwrap();
            // The node closes its end after a goodbye, unanswered.
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
            assert!(rest.is_empty(), "a goodbye is not answered");
        }
        drop(s);
    }
    let closed = "closed without a goodbye";
    ctrl.wait_until("the bare close noted", STARTUP, || {
        ctrl.logged(bare, closed)
    });
    // The bare close is noted at once; the told node handled its close before (it read the
    // goodbye before its connection ended, and closed it itself).
    assert!(!ctrl.logged(told, closed), "{}", ctrl.log(told));
}

/// Issue 25, defect 4: the campaign's "no append accepted since" check and the election are
/// one step. The primary is stopped (SIGSTOP); both standbys decide to campaign (pre-vote
/// granted) and are held right there by the failpoint `elect-campaign=pause`; the primary is
/// resumed and its appends are accepted (refreshing its lease on them); then the standbys go
/// on. Checked and elected in two turns of the Raft core, they raised the term anyway and
/// deposed a healthy primary that was still serving reads from its lease; now the election is
/// called off in the very turn that would start it.
#[test]
fn an_append_accepted_after_the_decision_calls_the_campaign_off() {
    let (ctrl, p, _, term) = settled_slow(&["--metrics", "127.0.0.1:0"]);
    let standbys: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    for &s in &standbys {
        ctrl.fail_set(s, "elect-campaign", "pause");
    }
    let since = log_since(&ctrl, &standbys);

    ctrl.pause(p);
    // Usually both decide; but one held at the failpoint may not answer the other's pre-vote
    // in time, and then only one does (the order is the scheduler's). Each that decided is
    // what is checked.
    ctrl.wait_until("a standby decided to campaign", STARTUP, || {
        (0..2).any(|i| since(i).contains("failpoint elect-campaign reached"))
    });
    let decided: Vec<usize> = (0..2)
        .filter(|&i| since(i).contains("failpoint elect-campaign reached"))
        .collect();
    let empty = "xce_raft_appends_received_total{kind=\"empty\"}";
    let before: Vec<f64> = standbys
        .iter()
        .map(|&s| ctrl.metric(s, empty).unwrap())
        .collect();
    ctrl.signal(p, libc::SIGCONT);
    ctrl.wait_until(
        "both standbys accepted the resumed primary's appends",
        STARTUP,
        || {
            standbys
                .iter()
                .zip(&before)
                .all(|(&s, b)| ctrl.metric(s, empty).is_some_and(|n| n > *b))
        },
    );
    for &s in &standbys {
        ctrl.fail_clear(s, "elect-campaign");
    }
    // Each standby either calls its campaign off or raises the term: wait for one of the two.
    ctrl.wait_until("each decided campaign ends", STARTUP, || {
        decided
            .iter()
            .all(|&i| since(i).contains("called off") || term_of(&ctrl, standbys[i]) > term)
    });
    unchanged(&ctrl, term, p, CALLED_OFF);
}

/// Issue 35, defect 2: a campaign's decision and its checks read one value. The decision
/// (no append for the lease) is taken; the campaign waits (here: held by the failpoint
/// `elect-decided`, as it may wait for another campaign's pre-vote); meanwhile the primary,
/// resumed, sends it an append, which it accepts (refreshing the primary's lease on it). A
/// campaign that then read the state afresh found nothing changed since *that* reading, got
/// the pre-vote of the third node (which no longer hears the primary: `repl-drop`) and raised
/// the term, deposing a primary that served reads from its lease. Now the append calls it off.
#[test]
fn an_append_accepted_while_a_decided_campaign_waits_calls_it_off() {
    let (ctrl, p, _, term) = settled_slow(&["--metrics", "127.0.0.1:0"]);
    let standbys: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    // `a` decides while the primary is stopped; `b` stops hearing the primary for good.
    let (a, b) = (standbys[0], standbys[1]);
    let since = log_since(&ctrl, &standbys);
    for &s in &standbys {
        ctrl.fail_set(s, "elect-decided", "pause");
    }
    ctrl.fail_set(p, "repl-drop", &format!("return({b})"));
    let reached = "failpoint elect-decided reached";
    ctrl.wait_until("b decided to campaign", STARTUP, || {
        since(1).contains(reached)
    });
    ctrl.pause(p);
    ctrl.wait_until("a decided to campaign", STARTUP, || {
        since(0).contains(reached)
    });
    let empty = "xce_raft_appends_received_total{kind=\"empty\"}";
    let before = ctrl.metric(a, empty).unwrap();
    ctrl.signal(p, libc::SIGCONT);
    ctrl.wait_until("a accepted the resumed primary's appends", STARTUP, || {
        ctrl.metric(a, empty).is_some_and(|n| n > before)
    });
    ctrl.fail_clear(a, "elect-decided");
    ctrl.wait_until("a's decided campaign ends", STARTUP, || {
        since(0).contains("called off") || term_of(&ctrl, a) > term
    });
    unchanged(&ctrl, term, p, CALLED_OFF);
    ctrl.fail_clear(b, "elect-decided");
    ctrl.fail_clear(p, "repl-drop");
}
