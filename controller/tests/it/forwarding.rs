//! C16 (F28) on a cluster with mutual TLS everywhere and identities (C13): a standby forwards a
//! client's request to the primary when asked, as that client — never with more rights — and
//! only a member may assert an identity on the raft port.

use crate::common::*;
use xce_proto::error::{E_XCE_AUTH, E_XCE_STANDBY};
use xce_proto::wire::{self, JobAction, Op, QueueAction, Reply, ReplyData};

// `tls_cluster` does not wait for every node's cluster id (C20): a standby refused for want
// of it forwards once it has it (`a_standby_forwards_once_it_has_the_cluster_id`).

/// `op` with the forwarding mark, on `c`.
fn forwarded(c: &mut WireClient, op: Op) -> Reply {
    let mut req = c.request(op);
    req.forward_within_ms = 3000;
    c.try_send_recv(&req).expect("forwarded call")
}

fn close_queue() -> Op {
    Op::QueueCtrl {
        queue: "normal".into(),
        action: QueueAction::Close,
    }
}

/// Whether queue `normal` is open, asked of the primary as admin.
fn normal_open(admin: &mut WireClient) -> bool {
    match admin.ok(Op::ClusterConf) {
        ReplyData::ClusterConf(c) => {
            c.queues
                .iter()
                .find(|q| q.name == "normal")
                .expect("queue normal")
                .open
        }
        other => panic!("clusterconf: {other:?}"),
    }
}

fn count(admin: &mut WireClient, id: u64) -> usize {
    let ids = job_ids(admin, Default::default());
    ids.into_iter().filter(|&j| j == id).count()
}

#[test]
fn a_standby_forwards_as_the_caller_and_never_with_more_rights() {
    let (certs, ctrl, p) = tls_cluster(3, 3, &CALM);
    let dir = certs.path();
    let s = if p == 1 { 2 } else { 1 };
    let mut admin = tls_client(&ctrl.addr(p), dir, Some("admin"));
    let mut alice = tls_client(&ctrl.addr(s), dir, Some("user-alice"));

    // Without the mark: as before, STANDBY with the primary's address.
    let j1 = rand_u64() >> 1;
    let r = alice.call(submit(j1, "alice", ""));
    assert_eq!(r.status, -E_XCE_STANDBY, "{r:?}");
    assert_eq!(hint(&r), ctrl.addr(p));

    // With it: served by the primary, as alice.
    let r = forwarded(&mut alice, submit(j1, "alice", ""));
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(r.data, ReplyData::JobId(j1));
    // Reads too.
    let r = forwarded(&mut alice, Op::JobInfo { job_id: j1 });
    assert_eq!(job(r.data).user, "alice");

    // Exactly once: the same write re-sent (same request id, new seq) through the standby,
    // then directly to the primary by the same client id, is one job.
    let j2 = rand_u64() >> 1;
    let mut req = alice.request(submit(j2, "alice", ""));
    req.forward_within_ms = 3000;
    assert_eq!(alice.try_send_recv(&req).unwrap().status, 0);
    alice.seq += 1;
    req.seq = alice.seq;
    let again = alice.try_send_recv(&req).unwrap();
    assert!(again.status >= 0, "re-send: {again:?}");
    let mut alice_p = tls_client(&ctrl.addr(p), dir, Some("user-alice"));
    alice_p.client_id = alice.client_id;
    alice_p.seq = 100;
    let mut direct = req.clone();
    direct.seq = 101;
    direct.forward_within_ms = 0;
    assert!(alice_p.try_send_recv(&direct).unwrap().status >= 0);
    assert_eq!(count(&mut admin, j2), 1);

    // Never more than alice may: not as bob (bound at the primary), not another user's job,
    // not an admin op.
    let j3 = rand_u64() >> 1;
    let r = forwarded(&mut alice, submit(j3, "bob", ""));
    assert_eq!(r.status, -E_XCE_AUTH, "{r:?}");
    assert_eq!(count(&mut admin, j3), 0);
    let j4 = rand_u64() >> 1;
    admin.ok(submit(j4, "bob", ""));
    let r = forwarded(
        &mut alice,
        Op::JobCtrl {
            job_id: j4,
            action: JobAction::Kill,
        },
    );
    assert_eq!(r.status, -E_XCE_AUTH, "{r:?}");
    let r = forwarded(&mut alice, close_queue());
    assert_eq!(r.status, -E_XCE_AUTH, "{r:?}");
    assert!(normal_open(&mut admin));
    // The primary refused bob's job for alice (the bound is checked on its state).
    let found = ctrl.logged(
        p,
        "for user-alice: user alice may not submit as user \"bob\"",
    );
    let log = ctrl.log(p);
    assert!(found, "no refusal logged by the primary:\n{log}");

    // Ops bound to a session are not forwarded: STANDBY as before.
    let r = forwarded(
        &mut alice,
        Op::SetPendReason {
            job_id: j1,
            reason: "x".into(),
        },
    );
    assert!(
        r.status == -E_XCE_STANDBY || r.status == -E_XCE_AUTH,
        "{r:?}"
    );
}

#[test]
fn only_a_member_may_assert_an_identity_on_the_raft_port() {
    let (certs, ctrl, p) = tls_cluster(3, 3, &CALM);
    let dir = certs.path();
    let other = if p == 3 { 2 } else { 3 };
    let mut admin = tls_client(&ctrl.addr(p), dir, Some("admin"));
    let mut c = WireClient::connect(&ctrl.addr(p));
    let close = c.request(close_queue());

    // WireClient identities of the cluster's CA, and no certificate at all, as peers claiming
    // admin: not admitted, nothing applied.
    for who in [
        Some("user-alice"),
        Some("admin"),
        Some("worker-host1"),
        None,
    ] {
        if let Ok(mut s) = as_peer(&ctrl, p, dir, who) {
            assert!(
                raft_wire::call(
                    &mut s,
                    &raft_wire::forward("admin", &close),
                    raft_wire::NO_ID
                )
                .is_err(),
                "{who:?} as a peer was answered"
            );
        }
    }
    assert!(
        normal_open(&mut admin),
        "a stranger's claim closed the queue"
    );

    // A member is trusted with the identity it asserts, and only with that identity.
    let mut member =
        as_peer(&ctrl, p, dir, Some(&format!("xce-node-{other}"))).expect("a member's handshake");
    let id = ctrl.cluster_id_via(|a| tls_client(a, dir, Some("admin")));
    let mut ask = |who: &str, req: &wire::Request| -> Vec<u8> {
        match raft_wire::call(&mut member, &raft_wire::forward(who, req), id) {
            Ok(raft_wire::RpcReply::Forward(b)) => b,
            other => panic!("forward for {who}: {other:?}"),
        }
    };
    let decode = |b: &[u8]| wire::decode_reply(b, &wire::Limits::default()).expect("reply");
    let r = decode(&ask("user-alice", &close));
    assert_eq!(r.status, -E_XCE_AUTH, "{r:?}");
    assert!(normal_open(&mut admin));
    // A name that says no role, or a frame that is no request: not taken.
    assert!(ask("root", &close).is_empty());
    assert!(ask("user-", &close).is_empty());
    let j = rand_u64() >> 1;
    let sub = c.request(submit(j, "alice", ""));
    let r = decode(&ask("user-alice", &sub));
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(count(&mut admin, j), 1);
    // The same request again (a standby's retry): the exactly-once table answers.
    let r = decode(&ask("user-alice", &sub));
    assert!(r.status >= 0, "{r:?}");
    assert_eq!(count(&mut admin, j), 1);
}

/// C15 (amended): forwarded requests and their replies are bulk. The standby forwards on
/// connections of their own, and the primary's end of such a connection gives up the raft
/// priority (DSCP 0), while the raft links it dialled keep CS6. Before: every connection of the
/// raft port was CS6, a listing's forwarded pages included.
#[test]
fn forwarded_bulk_does_not_claim_the_raft_priority() {
    let ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let s = (1..=3).find(|&i| i != p).unwrap();
    let mut c = ctrl.client(s);
    let r = forwarded(&mut c, Op::JobList(wire::JobFilter::default()));
    assert_eq!(r.status, 0, "the standby forwarded the listing");
    let sockets = sockets_tos();
    // The primary's accepted connections: the forwarding one is bulk now.
    let primary = ctrl.raft_addr(p);
    let accepted: Vec<_> = sockets.iter().filter(|(l, _, _)| *l == primary).collect();
    assert!(
        accepted.iter().any(|(_, _, tos)| tos == "0"),
        "no connection of the primary's raft port gave up the priority: {accepted:?}"
    );
    // Every connection dialled to a standby's raft port (the primary's raft links, questions)
    // keeps CS6 (0xc0).
    let standbys: Vec<String> = (1..=3)
        .filter(|&i| i != p)
        .map(|i| ctrl.raft_addr(i))
        .collect();
    let dialled: Vec<_> = sockets
        .iter()
        .filter(|(l, r, _)| standbys.contains(r) && !standbys.contains(l))
        .collect();
    assert!(
        dialled.len() >= 2,
        "the primary's raft links to both standbys: {dialled:?}"
    );
    for (l, r, tos) in dialled {
        assert_eq!(tos, "0xc0", "{l} → {r}, a standby's raft port");
    }
}

/// C20 with C16: a standby that has not yet taken the cluster's id from the log (its raft
/// messages unstamped, which a primary that has the id refuses) forwards once it has it,
/// within the client's budget. Before: it answered STANDBY — a brand-new cluster's standby
/// did so for the few appends between the primary's recording of the id and its own (a chance
/// failure of `s15_a_client_id_is_bound_to_its_identity` in CI). The standby's taking of the
/// id is held by a failpoint until the refusal has happened (counted), so the order is the
/// test's, not the scheduler's.
///
/// CALM timings: the standby forwards only while it vouches for its primary (appends within
/// the minimum election timeout, C16), which this test is not about. With the default 60 ms
/// an append that came late on a busy machine ended the wait (`forward.rs`, `vouched`: counted
/// `lost`) and the read was answered STANDBY: 3 failures in 130 runs at load 8–12 on 2 cores
/// (0 in 130 with CALM).
#[test]
fn a_standby_forwards_once_it_has_the_cluster_id() {
    const ADOPT: &str = "cluster-adopt";
    let mut ctrl = prepared(3, &[&CALM[..], &["--metrics", "127.0.0.1:0"]].concat());
    ctrl.failpoints_at_start(&format!("{ADOPT}=pause"));
    ctrl.start_all();
    let p = ctrl.expect_settled(STARTUP);
    let s = (1..=3).find(|&i| i != p).unwrap();
    for n in (1..=3).filter(|&n| n != s) {
        ctrl.fail_clear(n, ADOPT);
    }
    ctrl.wait_until(
        "the primary and the other standby take the id",
        STARTUP,
        || {
            (1..=3)
                .filter(|&n| n != s)
                .all(|n| ctrl.cluster_id_of(n).is_some_and(|id| id != [0; 16]))
        },
    );
    assert_eq!(
        ctrl.cluster_id_of(s),
        Some([0; 16]),
        "node {s} held without an id"
    );
    let unstamped = r#"xce_forwards_total{outcome="unstamped"}"#;
    assert_eq!(ctrl.metric(s, unstamped), Some(0.0));
    let addr = ctrl.addr(s).clone();
    let asked = std::thread::spawn(move || {
        let mut c = WireClient::connect(&addr);
        let mut req = c.request(Op::JobList(wire::JobFilter::default()));
        // The longest a standby waits for a forward (C16).
        req.forward_within_ms = 6000;
        c.try_send_recv(&req).expect("forwarded call")
    });
    ctrl.wait_until("the forward refused for want of the id", STARTUP, || {
        asked.is_finished() || ctrl.metric(s, unstamped).is_some_and(|n| n >= 1.0)
    });
    if asked.is_finished() {
        let r = asked.join().expect("the asking thread");
        panic!(
            "the standby answered before it had the id: {r:?}\nforwards: {}\n{}",
            forwards_of(&ctrl, s),
            ctrl.all_logs()
        );
    }
    ctrl.fail_clear(s, ADOPT);
    let r = asked.join().expect("the asking thread");
    assert_eq!(
        r.status,
        0,
        "forwarded once the id arrived: {r:?}\nforwards: {}\n{}",
        forwards_of(&ctrl, s),
        ctrl.all_logs()
    );
    assert!(ctrl.logged(s, "member of cluster"), "{}", ctrl.log(s));
}

/// How node `s`'s forwards ended (`xce_forwards_total` by outcome), for a failure's message.
fn forwards_of(ctrl: &Cluster, s: u32) -> String {
    ["replied", "unreachable", "refused", "lost", "unstamped"]
        .iter()
        .map(|o| {
            let name = format!("xce_forwards_total{{outcome=\"{o}\"}}");
            format!("{o}={}", ctrl.metric(s, &name).unwrap_or(0.0))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
