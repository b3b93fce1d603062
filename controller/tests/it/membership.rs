//! C17 / S16: members added and removed online under load. Three nodes; two writers submit
//! jobs all along through the library's client — one configured with every address it will ever
//! need, one with the original three only (an old daemon's list: F29, it learns the members
//! from the primary); node 4 is started with `--join` and added; the primary is killed for good
//! and removed; node 5 is added. Every acknowledged write exists exactly once, each writer saw 0
//! errors and got writes through after every change, the members are the four alive, a new node
//! becomes primary, and a kill -9 of the primary after that is survived too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use xce::client::Client;
use xce_proto::wire::{JobFilter, Op};

const CLI_TIMEOUT: Duration = Duration::from_secs(100);

fn member(ctrl: &Cluster, masters: &str, args: &[&str]) -> String {
    let mut all = vec!["member"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--masters", masters]);
    let (code, out, err) = run_cli(&all, CLI_TIMEOUT);
    assert_eq!(
        code,
        Some(0),
        "member {args:?}: {out}\n{err}\n{}",
        ctrl.all_logs()
    );
    out
}

/// The member ids `member list` prints.
fn listed(out: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn s16_replace_a_dead_machine_under_load() {
    let mut ctrl = cluster(3, &[]);
    ctrl.expect_settled(STARTUP);
    let (c4, _, spec4) = new_member(4);
    let (c5, _, spec5) = new_member(5);
    // The first three, as an old daemon's list has them.
    let old_masters = ctrl.masters();
    let masters = format!("{old_masters},{c4},{c5}");

    // Two writers, one context each for the whole run: one given every address it will need,
    // and an old daemon's, given only the first three (F29: it learns the new members from the
    // primary's replies; hints to nodes 4 and 5 are followed only because it learned them).
    let stop = Arc::new(AtomicBool::new(false));
    // Per writer: its acknowledged writes.
    let acked = Arc::new([Mutex::new(Vec::<u64>::new()), Mutex::new(Vec::new())]);
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let writers: Vec<_> = [
        ("all addresses", masters.clone()),
        ("old list", old_masters),
    ]
    .into_iter()
    .enumerate()
    .map(|(w, (who, masters))| {
        let (stop, acked, errors) = (stop.clone(), acked.clone(), errors.clone());
        std::thread::spawn(move || {
            let c = lib_client(&masters);
            while !stop.load(Ordering::Relaxed) {
                match c.jobsubmit(alice_job("s16")) {
                    Ok(id) => acked[w].lock().unwrap().push(id),
                    Err(e) => errors.lock().unwrap().push(format!(
                        "{who}: {e:?} {:?} masters {:?}",
                        c.last_error(),
                        c.masters()
                    )),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let masters = c.masters();
            c.close();
            masters
        })
    })
    .collect();
    let counts = || {
        acked
            .iter()
            .map(|a| a.lock().unwrap().len())
            .collect::<Vec<_>>()
    };
    // Each writer — the old list's too — gets writes through after every change: it reaches
    // every later primary.
    let progress = |ctrl: &Cluster, what: &str| {
        let before = counts();
        ctrl.wait_until(what, Duration::from_secs(20), || {
            counts().iter().zip(&before).all(|(n, b)| *n >= b + 10)
        });
    };
    progress(&ctrl, "writes before any change");

    // Node 4: started with --join, waits uninitialised; added.
    ctrl.start_extra_node(4, &c4, &spec4, &["--join"]);
    // Running; a node that initialised a cluster of its own would say so and lead it within
    // an election timeout (300 ms): none in 500 ms after it serves (a negative is only seen
    // over time; the code path is `cmd/run.rs`: no `initialize` with --join).
    ctrl.wait_until("node 4 serves clients", Duration::from_secs(10), || {
        ctrl.log(4).contains("serving clients on")
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !ctrl.log(4).contains("initialised a new cluster"),
        "{}",
        ctrl.log(4)
    );
    member(&ctrl, &masters, &["add", &spec4]);
    progress(&ctrl, "writes after adding node 4");

    // The primary (one of 1..3) dies for good and is removed: a failover and a membership
    // change, both under load.
    let dead = ctrl.expect_primary_among(&[1, 2, 3], Duration::from_secs(10));
    ctrl.kill(dead);
    member(&ctrl, &masters, &["remove", &dead.to_string()]);
    progress(&ctrl, "writes after removing the dead node");
    let live: Vec<u32> = [1, 2, 3, 4, 5].into_iter().filter(|&i| i != dead).collect();

    // Node 5 is added.
    ctrl.start_extra_node(5, &c5, &spec5, &["--join"]);
    member(&ctrl, &masters, &["add", &spec5]);
    progress(&ctrl, "writes after adding node 5");

    let mut ids = listed(&member(&ctrl, &masters, &["list"]));
    ids.sort_unstable();
    assert_eq!(ids, live);

    // A new node can lead: hand over (SIGTERM: to the most caught-up standby, highest id on a
    // tie) until one of them does; a handed-over node restarts with its old --cluster, which
    // the stored membership overrides.
    let mut p = ctrl.expect_primary_among(&live, Duration::from_secs(10));
    let mut restarted = Vec::new();
    for _ in 0..4 {
        if p >= 4 {
            break;
        }
        ctrl.signal(p, libc::SIGTERM);
        let others: Vec<u32> = live.iter().copied().filter(|&i| i != p).collect();
        let q = ctrl.expect_primary_among(&others, Duration::from_secs(10));
        ctrl.wait_until("the old primary exits", Duration::from_secs(10), || {
            ctrl.log(p).contains("shutting down")
        });
        std::thread::sleep(Duration::from_millis(300));
        ctrl.kill(p);
        ctrl.start_node(p);
        restarted.push(p);
        progress(&ctrl, "writes after a handover");
        p = q;
    }
    assert!(p >= 4, "node 4 or 5 never led\n{}", ctrl.all_logs());
    for r in restarted {
        assert!(ctrl.logged(r, "the stored one is used"), "{}", ctrl.log(r));
    }

    // And once more: kill -9 of that primary; the others elect a new one.
    ctrl.kill(p);
    let others: Vec<u32> = live.iter().copied().filter(|&i| i != p).collect();
    ctrl.expect_primary_among(&others, Duration::from_secs(10));
    progress(&ctrl, "writes after the last kill");

    stop.store(true, Ordering::Relaxed);
    let learned: Vec<Vec<String>> = writers
        .into_iter()
        .map(|w| w.join().unwrap().iter().map(ToString::to_string).collect())
        .collect();
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "writer errors: {errors:?}\n{}",
        ctrl.all_logs()
    );

    // Every acknowledged write exactly once.
    let reader = lib_client(&masters);
    let jobs = reader.joblist_all(JobFilter::default()).unwrap();
    reader.close();
    let mut count = BTreeMap::<u64, u32>::new();
    for j in &jobs {
        *count.entry(j.job_id).or_default() += 1;
    }
    // The old list's context learned both new nodes from the primary (F29).
    for a in [&c4, &c5] {
        assert!(learned[1].contains(a), "{a} not in {:?}", learned[1]);
    }
    let per_writer = counts();
    let acked: Vec<u64> = acked
        .iter()
        .flat_map(|a| a.lock().unwrap().clone())
        .collect();
    assert!(acked.len() > 100, "only {} writes", acked.len());
    for id in &acked {
        assert_eq!(count.get(id), Some(&1), "job {id}");
    }
    eprintln!(
        "S16: {} acknowledged writes (all addresses, old list: {per_writer:?}), all present \
         once; 0 errors; members {ids:?}; primary reached node {p}",
        acked.len()
    );
}

/// Refusals: unknown id, the last voter, a taken id or address, bad addresses; `--join`
/// never initialises.
#[test]
fn refusals() {
    let ctrl = cluster(1, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(p);
    let me = ctrl.spec().split_once('=').unwrap().1.to_string();
    let (mc, mr) = me.split_once('/').unwrap();
    let status = |c: &mut WireClient, op| c.call(op).status;
    let add = |id, client: &str, raft: &str| Op::MemberAdd {
        id,
        client_addr: client.into(),
        raft_addr: raft.into(),
    };
    assert_eq!(status(&mut c, Op::MemberRemove { id: 9 }), -libc::ENOENT);
    assert_eq!(status(&mut c, Op::MemberRemove { id: 1 }), -libc::EINVAL);
    assert_eq!(
        status(&mut c, add(1, "127.0.0.1:1", "127.0.0.1:2")),
        -libc::EEXIST
    );
    assert_eq!(status(&mut c, add(2, mc, "127.0.0.1:2")), -libc::EEXIST);
    assert_eq!(status(&mut c, add(2, "127.0.0.1:1", mr)), -libc::EEXIST);
    assert_eq!(
        status(&mut c, add(2, "nonsense", "127.0.0.1:2")),
        -libc::EINVAL
    );
    assert_eq!(
        status(&mut c, add(0, "127.0.0.1:1", "127.0.0.1:2")),
        -libc::EINVAL
    );
    // Adding a member already there as a voter, same addresses: done (a re-send).
    assert_eq!(status(&mut c, add(1, mc, mr)), 0);

    // The CLI: a usage error, and a refusal with its status.
    let (code, _, err) = run_cli(&["member", "add", "4"], CLI_TIMEOUT);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = run_cli(
        &["member", "remove", "7", "--masters", &ctrl.addr(1)],
        CLI_TIMEOUT,
    );
    assert_eq!(code, Some(1), "{err}");
    // Issue 36: the primary's reason and the status with its name.
    assert!(
        err.contains("node 7 is not a member") && err.contains("(status -2 ENOENT)"),
        "{err}"
    );
}

/// Removing the primary: it hands leadership over first, the command's client follows the
/// redirect and the new primary removes it; the others serve on.
#[test]
fn removing_the_primary_hands_over_first() {
    let ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let masters = ctrl.masters();
    member(&ctrl, &masters, &["remove", &p.to_string()]);
    assert!(
        ctrl.log(p)
            .contains("asked to remove itself: handing leadership over first"),
        "{}",
        ctrl.log(p)
    );
    let mut ids = listed(&member(&ctrl, &masters, &["list"]));
    ids.sort_unstable();
    let others: Vec<u32> = [1, 2, 3].into_iter().filter(|&i| i != p).collect();
    assert_eq!(ids, others);
    let q = ctrl.expect_primary_among(&others, Duration::from_secs(10));
    let mut c = ctrl.client(q);
    assert_eq!(c.call(submit(rand_u64(), "alice", "")).status, 0);
}

/// C17 × C14: the primary asked to remove itself hands over, but its one standby is paused:
/// the handover entry cannot commit, the removal is answered NOT_READY, and the primary must
/// serve again once the standby is back. Two voters, so nothing is left to chance: the standby
/// is the only one the handover can name, and the only one that could campaign; back, it finds
/// the handover entry stale (older than the handover's wait) and the primary still leading, so
/// it does not campaign — unless the primary proves its vote anew, nobody serves.
#[test]
fn a_called_off_self_removal_serves_again() {
    let ctrl = cluster(2, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let standby = 3 - p;
    ctrl.pause(standby);
    let mut c = ctrl.client(p);
    c.set_timeout(Duration::from_secs(20));
    let r = c.call(Op::MemberRemove { id: p });
    ctrl.signal(standby, libc::SIGCONT);
    assert_eq!(
        r.status,
        -xce_proto::error::E_XCE_NOT_READY,
        "{}",
        ctrl.all_logs()
    );
    // Issue 26: a standby stopped for longer than the handover's window is not named at all.
    assert!(
        ctrl.logged(
            p,
            &format!("handover to node {standby}: the entry did not commit")
        ) || ctrl.logged(p, "handover: no voter answered"),
        "{}",
        ctrl.log(p)
    );
    // The property: the cluster serves again (a primary whose removal was called off must not
    // stay out of service). Which node leads then is the election's: the standby, paused past
    // its lease, may campaign once it runs again on a loaded machine.
    ctrl.wait_until("a write is served again", Duration::from_secs(10), || {
        ctrl.running().iter().any(|&n| {
            WireClient::try_connect(&ctrl.addr(n), Duration::from_millis(500)).is_some_and(
                |mut c| {
                    c.try_call(submit(rand_u64() >> 1, "alice", ""))
                        .is_ok_and(|r| r.status == 0)
                },
            )
        })
    });
}

/// C13 × C17 on a TLS cluster: only admin changes the membership (a user is refused with
/// E_XCE_AUTH, and may list); a node added with `--join` over mutual TLS (its `--cluster`
/// names the current members) catches up and becomes a voter.
#[test]
fn tls_admin_only_and_join_over_mutual_tls() {
    let (pki, mut ctrl, p) = tls_cluster(3, 4, &[]);
    let masters = ctrl.masters();

    let mut alice = tls_client(&ctrl.addr(p), pki.path(), Some("user-alice"));
    let r = alice.call(Op::MemberRemove { id: 2 });
    assert_eq!(r.status, -xce_proto::error::E_XCE_AUTH);

    let (c4, _, spec4) = new_member(4);
    let mut node_flags = tls_flags(pki.path(), true);
    node_flags.push("--join".into());
    let node_refs: Vec<&str> = node_flags.iter().map(String::as_str).collect();
    ctrl.start_extra_node(4, &c4, &format!("{},{spec4}", ctrl.spec()), &node_refs);

    let as_who = |who: &str, args: &[&str]| {
        let mut all: Vec<String> = ["member"]
            .iter()
            .chain(args)
            .map(|a| a.to_string())
            .collect();
        all.extend(["--masters".to_string(), masters.clone()]);
        all.extend(identity_args(pki.path(), who));
        run_cli(&all, CLI_TIMEOUT)
    };
    let (code, out, err) = as_who("user-alice", &["add", &spec4]);
    assert_eq!(code, Some(1), "{out}{err}");
    let (code, out, err) = as_who("admin", &["add", &spec4]);
    assert_eq!(code, Some(0), "{out}{err}\n{}", ctrl.all_logs());
    let (code, out, err) = as_who("user-alice", &["list"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mut ids = listed(&out);
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3, 4], "{out}");
    assert!(
        ctrl.logged(p, "refused member_remove") && ctrl.log(p).contains("user-alice"),
        "{}",
        ctrl.log(p)
    );
}

/// F16 for `member remove`: a re-send of a removal that committed (same client and request
/// id, as the library re-sends after an unknown outcome) answers 0, not ENOENT; a new request
/// removing a node that is not a member is still ENOENT.
#[test]
fn a_resent_removal_is_answered_once() {
    let ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let standby = [1u32, 2, 3].into_iter().find(|&i| i != p).unwrap();
    let mut c = ctrl.client(p);
    let req = c.request(Op::MemberRemove { id: standby });
    assert_eq!(c.try_send_recv(&req).unwrap().status, 0, "the removal");
    let mut again = req.clone();
    again.seq = req.seq + 1;
    c.seq = again.seq;
    assert_eq!(
        c.try_send_recv(&again).unwrap().status,
        0,
        "a re-send of the removal that committed"
    );
    assert_eq!(
        c.call(Op::MemberRemove { id: standby }).status,
        -libc::ENOENT,
        "a new removal of a node that is not a member"
    );
}

/// History: `writers` library contexts at once, each submitting `each` jobs (many Raft
/// entries); every write must succeed (`what` names it).
fn history(masters: &str, writers: usize, each: usize, what: &'static str) {
    let threads: Vec<_> = (0..writers)
        .map(|_| {
            let c = lib_client(masters);
            std::thread::spawn(move || {
                for _ in 0..each {
                    c.jobsubmit(alice_job("history")).expect(what);
                }
                c.close();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A write through `c` that must succeed (its job id).
fn must_write(ctrl: &Cluster, c: &Client, what: &str) -> u64 {
    c.jobsubmit(alice_job("f29")).unwrap_or_else(|e| {
        panic!(
            "{what}: {e:?} ({:?}); masters {:?}\n{}",
            c.last_error(),
            c.masters(),
            ctrl.all_logs()
        )
    })
}

/// F29 with C17 ("a daemon configured with the original three addresses keeps working after
/// all three were replaced one by one"): a context given the original three, which stays on
/// one primary all along, learns each member added on its next replies (the primary's
/// membership version), not only on its next connection. The primary is replaced last, so the
/// context never reconnects until its three configured controllers are all gone; then only
/// what it learned can reach the cluster. (Before: it knew the members of its one connection,
/// and the last failover found nobody — ECONNREFUSED from the three it knew.)
#[test]
fn old_list_follows_every_replacement() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let original = ctrl.masters();
    let c = lib_client(&original);
    must_write(&ctrl, &c, "first write");
    // The standbys first, the primary last.
    let mut olds: Vec<u32> = [1u32, 2, 3].into_iter().filter(|&i| i != p).collect();
    olds.push(p);
    for (k, &old) in olds.iter().enumerate() {
        let new = 4 + k as u32;
        let (cn, _, spec) = new_member(new);
        ctrl.start_extra_node(new, &cn, &spec, &["--join"]);
        ctrl.wait_until(
            "the new node serves clients",
            Duration::from_secs(10),
            || ctrl.log(new).contains("serving clients on"),
        );
        let every = ctrl.masters();
        member(&ctrl, &every, &["add", &spec]);
        // The first reply after the change carries its version; the next call asks the
        // primary's hello first.
        must_write(&ctrl, &c, &format!("after adding node {new}"));
        must_write(&ctrl, &c, &format!("after adding node {new}, again"));
        let masters: Vec<String> = c.masters().iter().map(ToString::to_string).collect();
        assert!(
            masters.contains(&cn),
            "node {new} ({cn}) not learned after two replies of the primary: {masters:?}"
        );
        member(&ctrl, &every, &["remove", &old.to_string()]);
        ctrl.kill(old);
        must_write(
            &ctrl,
            &c,
            &format!("after node {old} was removed and killed"),
        );
    }
    let stats = c.stats();
    assert_eq!(stats.masters.len(), 6, "{:?}", stats.masters);
    assert_eq!(stats.learned_masters, 3);
    // Nothing of the original three is left: the writes went to the new nodes.
    assert_eq!(ctrl.running(), vec![4, 5, 6]);
    must_write(&ctrl, &c, "last write");
    c.close();
}

/// C17 × C12: a node added is a voter only once it holds the leader's log. Three nodes with
/// some history; node 4 is added and the primary is killed the moment `member add` returns:
/// the two standbys need node 4's vote (3 of 4), and a node that has not caught up refuses
/// every vote (C12) — so had it been made a voter before holding the log, no primary could
/// ever be elected. (Before: openraft's "blocking" `add_learner` returns once the learner is
/// within `replication_lag_threshold` — 5000 — entries, at once in a young cluster; S16 found
/// no primary for good after such a kill, 1 run in 20.)
#[test]
fn a_new_voter_holds_the_log_before_it_counts() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let masters = ctrl.masters();
    // History: writes from a few contexts at once (many Raft entries).
    history(&masters, 4, 300, "a write of the history");
    let (c4, _, spec4) = new_member(4);
    ctrl.start_extra_node(4, &c4, &spec4, &["--join"]);
    ctrl.wait_until("node 4 serves clients", Duration::from_secs(10), || {
        ctrl.log(4).contains("serving clients on")
    });
    let every = ctrl.masters();
    member(&ctrl, &every, &["add", &spec4]);
    ctrl.kill(p);
    let others: Vec<u32> = [1u32, 2, 3, 4].into_iter().filter(|&i| i != p).collect();
    let q = ctrl.expect_primary_among(&others, Duration::from_secs(10));
    let c = lib_client(&every);
    must_write(&ctrl, &c, &format!("after the kill, node {q} primary"));
    c.close();
}

/// Issue 26 × C17, found by the nemesis (S18, seed 4242): the documented replacement of a
/// machine with the same id and addresses — `member remove`, the data directory emptied, `run
/// --join`, `member add`. The blank node is sent the log from its start: the first membership
/// names it (it was an original member), a later one removes it (history: the removal that
/// came before this addition). It took that for its own removal and exited 78 half a second
/// after it started; `member add` answered "outcome unknown" after 60 s and took the learner
/// out again. A process started with `--join` replays history: only a member's word (a refusal
/// naming a membership past its own) tells it it was removed.
#[test]
fn a_machine_replaced_with_the_same_id_is_added_not_sent_away() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let s = if p == 1 { 2 } else { 1 };
    let every = ctrl.masters();
    let c = lib_client(&every);
    must_write(&ctrl, &c, "a write before the removal");
    member(&ctrl, &every, &["remove", &s.to_string()]);
    ctrl.kill(s);
    // History after the removal, more than one append carries: the new node's log passes
    // through the removal as its effective membership before it reaches its addition.
    history(&every, 8, 250, "a write after the removal");
    std::fs::remove_dir_all(ctrl.data_dir().join(format!("data-{s}"))).unwrap();
    let spec = ctrl.spec_of(s);
    let client = ctrl.addr(s).clone();
    ctrl.start_extra_node(s, &client, &spec, &["--join"]);
    member(&ctrl, &every, &["add", &spec]);
    let out = member(&ctrl, &every, &["list"]);
    assert!(listed(&out).contains(&s), "node {s} not listed:\n{out}");
    assert!(
        ctrl.wait_exit(s, Duration::ZERO).is_none() && !ctrl.log(s).contains("removed from"),
        "node {s} took an old membership for its removal:\n{}",
        ctrl.log(s)
    );
    // A voter again: the primary killed, the two left elect one and serve.
    ctrl.kill(p);
    ctrl.expect_primary(STARTUP);
    must_write(&ctrl, &c, "a write after the primary was killed");
    c.close();
}

/// Found by the nemesis (S20): a node removed, added back (`run --join`, `member add`), that
/// then loses its disk again and is started with its first flags (no `--join`). Blank, it
/// replays the cluster's log from its start — the first membership names it, a later one
/// leaves it out — and took that for its own removal: exit 78 at every start. A node that
/// started blank replays history as a `--join` node does: only a member's word removes it.
/// The replay is held at each step by the primary's failpoint `repl-max-index`: first at the
/// initial membership (it names the node), then at the removal (it leaves it out).
#[test]
fn a_node_added_back_that_loses_its_disk_again_is_not_sent_away() {
    let mut ctrl = cluster(
        3,
        &["--snapshot-logs", "1000000", "--metrics", "127.0.0.1:0"],
    );
    let p = ctrl.expect_settled(STARTUP);
    let s = if p == 1 { 2 } else { 1 };
    let every = ctrl.masters();
    member(&ctrl, &every, &["remove", &s.to_string()]);
    let removal = ctrl.metric(p, "xce_raft_last_log_index").expect("metrics") as u64;
    ctrl.kill(s);
    std::fs::remove_dir_all(ctrl.data(s)).unwrap();
    let spec = ctrl.spec_of(s);
    let client = ctrl.addr(s);
    ctrl.start_extra_node(s, &client, &spec, &["--join", "--metrics", "127.0.0.1:0"]);
    member(&ctrl, &every, &["add", &spec]);
    ctrl.wait_until("the node added back caught up", STARTUP, || {
        ctrl.log(s).contains("votes and campaigns again")
    });
    ctrl.kill(s);
    std::fs::remove_dir_all(ctrl.data(s)).unwrap();
    let from = ctrl.log(s).len();
    let last = |ctrl: &Cluster| ctrl.metric(s, "xce_raft_last_log_index").unwrap_or(-1.0) as i64;
    for (step, upto) in [("the initial membership", 1), ("the removal", removal)] {
        ctrl.fail_set(p, "repl-max-index", &format!("return({upto})"));
        if step == "the initial membership" {
            ctrl.start_node_as_first(s);
        }
        let deadline = std::time::Instant::now() + STARTUP;
        while last(&ctrl) < upto as i64 {
            if let Some(st) = ctrl.wait_exit(s, Duration::from_millis(100)) {
                panic!(
                    "node {s}, blank again, exited ({st}) at {step}: it took an old membership \
                     for its removal:\n{}",
                    ctrl.log(s)
                );
            }
            assert!(std::time::Instant::now() < deadline, "{step} never reached");
        }
    }
    assert!(
        ctrl.wait_exit(s, Duration::from_secs(1)).is_none(),
        "node {s}, blank again, took the removal in its log for its own:\n{}",
        ctrl.log(s)
    );
    ctrl.fail_clear(p, "repl-max-index");
    ctrl.wait_until("the node caught up once more", STARTUP, || {
        ctrl.logged_since(s, from, "votes and campaigns again")
    });
}
