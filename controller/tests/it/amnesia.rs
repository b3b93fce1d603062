//! S17 / C12: an acknowledged write survives a follower's disk loss followed by the leader's
//! death. With N down, job W is acknowledged by {L, F}; F's data directory is removed; L is
//! killed; F restarts empty and N restarts from its own data. F must not help N (which never
//! had W) become primary: `jobinfo(W)` never answers ENOENT — the cluster stays unavailable
//! until L is back, then W is there — and once F has caught up it votes again.

use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::{ControllerRole, Op, ReplyData};

/// Asks every node in `ids` for `jobinfo(job)`; returns the statuses of the nodes that answered
/// as primary (status 0 or ENOENT).
fn ask(c: &Cluster, ids: &[u32], job: u64) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    for &id in ids {
        let Some(mut cl) = WireClient::try_connect(&c.addr(id), Duration::from_millis(300)) else {
            continue;
        };
        cl.set_timeout(Duration::from_secs(3));
        if let Ok(r) = cl.try_call(Op::JobInfo { job_id: job }) {
            if r.status == 0 || r.status == -libc::ENOENT {
                out.push((id, r.status));
            }
        }
    }
    out
}

/// For 6 s while L is down, no node of `ids` answers `jobinfo(w)` as primary with ENOENT
/// (`why`: what such an answer would mean); unavailable is the safe answer.
fn never_without(c: &Cluster, ids: &[u32], w: u64, why: &str) {
    let t0 = Instant::now();
    let mut served = 0;
    while t0.elapsed() < Duration::from_secs(6) {
        for (id, status) in ask(c, ids, w) {
            assert_eq!(
                status,
                0,
                "node {id} answered jobinfo(W) with ENOENT: {why}\n{}",
                c.all_logs()
            );
            served += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("while L was down: {served} answers from a primary (all with W)");
}

/// L is started again: a primary answers `jobinfo(w)`, never ENOENT, and F (its log read
/// from `f_log_from`) catches up.
fn l_back_f_caught_up(c: &mut Cluster, l: u32, f: u32, f_log_from: usize, w: u64) {
    c.start_node(l);
    c.wait_until("jobinfo(W) from a primary", Duration::from_secs(30), || {
        let got = ask(c, &[1, 2, 3], w);
        for &(id, s) in &got {
            assert_eq!(
                s,
                0,
                "node {id}: W lost after L came back\n{}",
                c.all_logs()
            );
        }
        !got.is_empty()
    });
    c.wait_until("F caught up", Duration::from_secs(30), || {
        c.logged_since(f, f_log_from, "votes and campaigns again")
    });
}

fn is_primary(c: &Cluster, id: u32) -> bool {
    WireClient::try_connect(&c.addr(id), Duration::from_millis(300)).is_some_and(|mut cl| {
        cl.set_timeout(Duration::from_secs(2));
        cl.try_call(hello()).is_ok_and(|r| {
            matches!(&r.data, ReplyData::CtrlInfo(i) if i.role == ControllerRole::Primary)
                && r.status == 0
        })
    })
}

#[test]
fn s17_write_survives_follower_disk_loss_and_leader_death() {
    let mut c = cluster(3, &[]);
    let l = c.expect_settled(STARTUP);
    let others: Vec<u32> = (1..=3).filter(|&i| i != l).collect();
    let (f, n) = (others[0], others[1]);

    // Some history everyone has, then N goes down and W is acknowledged by {L, F} only.
    let mut cl = c.client(l);
    for i in 0..20 {
        cl.ok(submit(1000 + i, "alice", ""));
    }
    c.kill(n);
    let w = 777_777;
    cl.ok(submit(w, "alice", ""));
    for i in 0..20 {
        cl.ok(submit(2000 + i, "alice", ""));
    }
    drop(cl);

    // L dies; F loses its disk and comes back empty; N comes back with its own (older) data.
    c.kill(l);
    c.kill(f);
    std::fs::remove_dir_all(c.data_dir().join(format!("data-{f}"))).unwrap();
    // F's log goes on across restarts: only what the empty F writes counts below (its line
    // from the cluster's first election would satisfy "caught up" at once).
    let f_log_from = c.log(f).len();
    c.start_node(f);
    c.start_node(n);

    // Without L no node may serve a table that lacks W (ENOENT): unavailable is the safe answer.
    never_without(&c, &[f, n], w, "an acknowledged write was lost");
    assert!(
        c.logged_since(f, f_log_from, "refusing vote"),
        "F never refused a vote\n{}",
        c.all_logs()
    );

    // L is back: a primary is elected and W is there.
    l_back_f_caught_up(&mut c, l, f, f_log_from, w);
    assert!(
        !c.data_dir().join(format!("data-{f}/catching-up")).exists(),
        "marker still there"
    );

    // F votes again: with L killed once more, F and N elect a primary, and W is still there.
    let p = c.expect_primary(STARTUP);
    c.kill(p);
    let rest: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
    let p2 = c.expect_primary_among(&rest, STARTUP);
    assert!(is_primary(&c, p2));
    assert_eq!(
        ask(&c, &[p2], w),
        vec![(p2, 0)],
        "W after the second failover"
    );
}

/// C1 with C12 (fifth round): a brand-new cluster forms once every member has started. Nodes
/// 2 and 3 alone cannot tell a brand-new cluster from one whose node 1 holds acknowledged
/// writes (both blank, one of them may have lost its data), so they elect no one, for several
/// election timeouts; node 1 starts, the three form the cluster, and the one that did not lead
/// catches up and votes like the others.
#[test]
fn a_new_cluster_forms_once_every_member_has_started() {
    let mut c = prepared(3, &[]);
    c.start_node(2);
    c.start_node(3);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        for id in [2, 3] {
            assert!(
                !is_primary(&c, id),
                "node {id} leads without node 1\n{}",
                c.all_logs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in [2, 3] {
        assert!(
            !c.log(id).contains("every other voter answered"),
            "node {id} knew its floor without node 1\n{}",
            c.all_logs()
        );
    }
    c.start_node(1);
    let p = c.expect_primary(STARTUP);
    c.client(p).ok(submit(5, "alice", ""));
    for id in 1..=3 {
        c.wait_until(&format!("node {id} caught up"), STARTUP, || {
            c.log(id).contains("votes and campaigns again")
        });
    }
    // Every node counts: with the primary gone, the other two elect one.
    c.kill(p);
    let rest: Vec<u32> = [1, 2, 3].into_iter().filter(|&i| i != p).collect();
    let p2 = c.expect_primary_among(&rest, STARTUP);
    assert_eq!(ask(&c, &[p2], 5), vec![(p2, 0)]);
}

/// C12 amended (issue 25, defect 2): an old entry of its own, replicated back, is not "caught
/// up". F led once (term t_F, its last entry at index K); L leads now; N stops hearing L
/// (failpoint `repl-drop` on L: N lives, and answers F, but gets nothing more); W is
/// acknowledged by {L, F}; F loses its data and restarts; L replicates the old log to F, held
/// (failpoint `repl-max-index` on L) at K, so F's partial log ends in an entry F wrote as
/// leader; L dies before F has W; N has no W. Under the old rule ("the log ends with an entry
/// this node wrote as leader") F voted again and elected N, which served a table without W
/// (ENOENT). Now F refuses: the cluster stays unavailable until L is back, with W. (N lives
/// throughout: with N down, F would not even take L's appends — it hears every other voter
/// first, C12 fifth round.)
#[test]
fn an_old_entry_of_its_own_replicated_back_is_not_caught_up() {
    let mut c = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let f = c.expect_settled(STARTUP);
    // F leads: entries of its own term, the last at index K.
    let mut cl = c.client(f);
    for i in 0..10 {
        cl.ok(submit(100 + i, "alice", ""));
    }
    drop(cl);
    let k = c.metric(f, "xce_raft_last_log_index").expect("F's metrics") as u64;

    // L takes over; F comes back with its data and follows L; N goes down.
    c.kill(f);
    let others: Vec<u32> = (1..=3).filter(|&i| i != f).collect();
    let l = c.expect_primary_among(&others, STARTUP);
    let n = *others.iter().find(|&&i| i != l).unwrap();
    c.start_node(f);
    c.expect_settled(STARTUP);
    c.fail_set(l, "repl-drop", &format!("return({n})"));
    let w = 777_777;
    c.client(l).ok(submit(w, "alice", ""));

    // F loses its data; L's appends stop at K, in F's own old entry.
    c.fail_set(l, "repl-max-index", &format!("return({k})"));
    c.kill(f);
    std::fs::remove_dir_all(c.data_dir().join(format!("data-{f}"))).unwrap();
    let (f_log_from, f_starts) = (c.log(f).len(), c.starts(f));
    c.start_node(f);
    c.wait_until("F restarted", STARTUP, || c.starts(f) > f_starts);
    c.wait_until("F's log at K", STARTUP, || {
        c.metric(f, "xce_raft_last_log_index") == Some(k as f64)
    });
    assert!(
        c.metric(f, "xce_raft_last_log_index") == Some(k as f64),
        "F's log went past K"
    );

    // L dies before F has W; N has no W.
    c.kill(l);
    never_without(
        &c,
        &[f, n],
        w,
        "F counted its own old entry as caught up and helped elect N",
    );
    let since = c.log_since(f, f_log_from);
    assert!(
        !since.contains("votes and campaigns again"),
        "F counted itself caught up without W\n{}",
        c.all_logs()
    );

    // L is back (without the failpoint): W is there, and F catches up for real.
    l_back_f_caught_up(&mut c, l, f, f_log_from, w);
}

/// C12 (found by the nemesis, S20): a node caught up after losing its disk campaigns again.
/// Catching up changed neither its vote nor its floor, which was all that lifted its campaign
/// hold, so it never campaigned — and when it was the only node that could win (the other
/// survivor's log behind: `repl-drop` on the primary), the cluster stayed without a primary.
#[test]
fn a_node_caught_up_after_losing_its_disk_campaigns_again() {
    let mut c = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let l = c.expect_settled(STARTUP);
    let others: Vec<u32> = (1..=3).filter(|&i| i != l).collect();
    let (f, n) = (others[0], others[1]);
    c.client(l).ok(submit(1, "alice", ""));
    let k = c.metric(l, "xce_raft_last_log_index").expect("L's metrics") as u64;
    c.kill(f);
    std::fs::remove_dir_all(c.data(f)).unwrap();
    // F follows L (its role and vote settle) before it catches up, later, on an append that
    // changes neither: L's appends stop short of its commit index until the failpoint goes.
    c.fail_set(l, "repl-max-index", &format!("return({})", k - 1));
    let from = c.log(f).len();
    c.start_node(f);
    c.wait_until("F follows L, not caught up", STARTUP, || {
        c.logged_since(f, from, "role=standby term=")
    });
    assert!(!c.logged_since(f, from, "votes and campaigns again"));
    c.fail_clear(l, "repl-max-index");
    c.wait_until("F caught up", STARTUP, || {
        c.logged_since(f, from, "votes and campaigns again")
    });
    // N falls behind; F holds what N lacks, so only F can win once L is gone.
    c.fail_set(l, "repl-drop", &format!("return({n})"));
    let mut cl = c.client(l);
    for i in 2..=5 {
        cl.ok(submit(i, "alice", ""));
    }
    drop(cl);
    c.kill(l);
    let p = c.expect_primary_among(&[f, n], STARTUP);
    assert_eq!(
        p,
        f,
        "only F holds every acknowledged write\n{}",
        c.all_logs()
    );
    assert_eq!(ask(&c, &[p], 5), vec![(p, 0)]);
}
