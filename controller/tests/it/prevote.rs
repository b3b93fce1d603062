//! C15, P14: the pre-vote answer on the raft port (`raft/elect.rs`,
//! `ports/peer.rs::answer_pre_vote`).
//! A node says yes only when it would grant the vote itself and has not heard from a leader
//! within the lease; answering changes nothing on it. And a node left alone never raises its
//! term: its own pre-vote finds no quorum. (A node cut off by the network, and one coming
//! back: `proof/tests/prevote.rs`.)

use std::time::Duration;

use crate::common::*;
use openraft::{CommittedLeaderId, LogId};

fn pre_vote(addr: &str, id: [u8; 16], term: u64, candidate: u64, last: Option<(u64, u64)>) -> bool {
    let req = raft_wire::RpcRequest::PreVote {
        term,
        candidate,
        last_log_id: last.map(|(t, i)| LogId::new(CommittedLeaderId::new(t, candidate), i)),
    };
    match raft_wire::call_at(addr, &req, id).expect("pre-vote answered") {
        raft_wire::RpcReply::PreVote(granted) => granted,
        other => panic!("not a pre-vote answer: {other:?}"),
    }
}

#[test]
fn pre_vote_answers_follow_the_leader_lease_and_the_log() {
    // Slower than the defaults: a loaded machine must not make a standby miss its leader's
    // lease by accident (lease 600 ms).
    let mut ctrl = cluster(3, &timing("50", "300", "600"));
    let p = ctrl.expect_settled(STARTUP);
    let id = ctrl.cluster_id();
    let t = term_of(&ctrl, p);
    let rest: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    let (f, g) = (rest[0], rest[1]);
    // A log far ahead of anyone's, in a higher term: openraft would grant the vote but for the
    // lease. The leader and a standby that hears it both say no.
    let ahead = Some((t + 10, 1_000_000));
    assert!(
        !pre_vote(&ctrl.raft_addr(p), id, t + 10, g.into(), ahead),
        "the leader said yes"
    );
    assert!(
        !pre_vote(&ctrl.raft_addr(f), id, t + 10, g.into(), ahead),
        "a standby hearing its leader said yes"
    );

    // Alone: the others gone, f hears no leader.
    ctrl.kill(p);
    ctrl.kill(g);
    // Past the lease (600 ms) and several election timeouts: f's own pre-votes find no
    // quorum, so its term does not move.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        term_of(&ctrl, f),
        t,
        "a node left alone campaigned:\n{}",
        ctrl.log(f)
    );
    // A candidate whose log is behind f's: no. One at least as up to date: yes.
    assert!(
        !pre_vote(&ctrl.raft_addr(f), id, t + 1, g.into(), None),
        "yes to a shorter log"
    );
    assert!(
        pre_vote(&ctrl.raft_addr(f), id, t + 1, g.into(), ahead),
        "no although f hears no leader"
    );
    // Answering changed nothing: no vote given, no term taken.
    let i = info(&ctrl.client(f).call(hello()));
    assert_eq!(i.term, t, "a pre-vote changed the term");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        term_of(&ctrl, f),
        t,
        "a node left alone campaigned:\n{}",
        ctrl.log(f)
    );
    assert!(
        ctrl.log(f)
            .contains("not granted by a quorum: not campaigning"),
        "{}",
        ctrl.log(f)
    );
}
