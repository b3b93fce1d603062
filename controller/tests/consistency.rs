//! C19: the online consistency check, on real processes. A member's state is made to differ
//! from the others' outside the log — the way a damaged disk or a bad restore does it: the
//! node is killed and one number in its snapshot file is changed (the default queue's
//! priority, a field no command touches afterwards), then it is started again. Raft sees
//! nothing wrong (the log ids match); the primary's periodic check must find it within 10 s,
//! name the node and the index, count it, and the node must stop voting and serving — still
//! after a restart — until its data directory is emptied and it rejoins.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use xce::wire::{ControllerRole, Op, ReplyData};

/// The issue's bound: an induced divergence is reported within this.
const FOUND_WITHIN: Duration = Duration::from_secs(10);

/// Changes the default queue's priority in node `dir`'s snapshot file (the JSON header keeps
/// its length: 20 -> `to`, two digits).
fn corrupt_snapshot(dir: &Path, to: u8) {
    let p = dir.join("snapshot.bin");
    let bytes = std::fs::read(&p).unwrap();
    let from = br#""priority":20"#;
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the default queue's priority in the snapshot");
    let mut out = bytes.clone();
    out[at..at + from.len()].copy_from_slice(format!(r#""priority":{to}"#).as_bytes());
    std::fs::write(&p, out).unwrap();
}

/// The primary's answer to a consistency check (it runs one first).
fn check(ctrl: &Ctrl, p: u64) -> xce::wire::ControllerInfo {
    let mut c = ctrl.client(p);
    info(&c.call(Op::ConsistencyCheck))
}

/// Node `id`'s `hello` answer (a default one while its client port is not up, or while it
/// answers with a status and no info: a primary cut off from its quorum for a moment answers
/// NOMASTER — seen in a soak run, where the polling loop asking it panicked instead of asking
/// again).
fn hello_of(ctrl: &Ctrl, id: u64) -> xce::wire::ControllerInfo {
    let answer = Client::try_connect(&ctrl.clients[&id], Duration::from_millis(500))
        .and_then(|mut c| c.try_call(hello()).ok());
    match answer.map(|r| r.data) {
        Some(ReplyData::CtrlInfo(i)) => i,
        _ => Default::default(),
    }
}

/// The metrics address node `id` printed last (`metrics on http://ADDR/metrics`).
fn metrics_addr(ctrl: &Ctrl, id: u64) -> String {
    let mut addr = None;
    ctrl.wait_until(&format!("node {id}'s metrics address"), STARTUP, || {
        addr = ctrl
            .log(id)
            .rsplit("metrics on http://")
            .next()
            .filter(|_| ctrl.log(id).contains("metrics on http://"))
            .and_then(|r| r.split("/metrics").next())
            .map(str::to_string);
        addr.is_some()
    });
    addr.unwrap()
}

/// `GET /metrics`: the body.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The value of the sample named exactly `name` (0 if absent).
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| {
            let (n, v) = l.rsplit_once(' ')?;
            (n == name).then(|| v.parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// Submits jobs `from..from + n` through the primary `p`.
fn fill(ctrl: &Ctrl, p: u64, from: u64, n: u64) {
    let mut c = ctrl.client(p);
    for i in from..from + n {
        c.ok(submit(i, "alice", ""));
    }
}

/// A standby whose state differs is found by the periodic check within 10 s (log line naming
/// the nodes and the index, `xce_state_digest_mismatch_total`, an alarm in `status`), stops
/// voting and serving (NOT_READY; its raft port refuses appends; still after a restart), and
/// comes back once its data directory is emptied and it rejoins with `--join`. A healthy
/// cluster under writes raises nothing first.
#[test]
fn a_member_whose_state_differs_is_found_stopped_and_repaired() {
    let mut ctrl = Ctrl::start(3, &["--snapshot-logs", "10", "--metrics", "127.0.0.1:0"]);
    let p = ctrl.wait_settled(STARTUP);
    fill(&ctrl, p, 1_000, 60);
    let v = [1u64, 2, 3].into_iter().find(|&i| i != p).unwrap();
    let vdir = ctrl.dir.path().join(format!("data-{v}"));
    ctrl.wait_until("the standby's snapshot", STARTUP, || {
        vdir.join("snapshot.bin").exists()
    });
    // Healthy, under writes: checks pass and nothing is raised (no false alarm).
    let healthy = check(&ctrl, p);
    assert!(healthy.checked_index > 0, "{healthy:?}");
    assert!(healthy.alarms.is_empty(), "{:?}", healthy.alarms);
    fill(&ctrl, p, 2_000, 5);
    let paddr = metrics_addr(&ctrl, p);
    assert_eq!(
        sample(&scrape(&paddr), "xce_state_digest_mismatch_total"),
        0.0
    );

    ctrl.kill9(v);
    corrupt_snapshot(&vdir, 21);
    ctrl.start_node(v);
    let restarted = Instant::now();
    // Found by the periodic check (hello only reads what the checks found).
    let mut found = Vec::new();
    ctrl.wait_until("the primary's alarm", FOUND_WITHIN * 2, || {
        found = hello_of(&ctrl, p).alarms;
        found.iter().any(|a| a.starts_with(&format!("node {v}:")))
    });
    let took = restarted.elapsed();
    eprintln!("divergence of node {v} reported {took:?} after its restart: {found:?}");
    assert!(took <= FOUND_WITHIN, "found after {took:?}");
    assert!(
        ctrl.logged(p, &format!("node {v} diverged (C19)"))
            && ctrl.log(p).contains("state digest mismatch at index"),
        "no log line naming the nodes and the index:\n{}",
        ctrl.log(p)
    );
    assert!(sample(&scrape(&paddr), "xce_state_digest_mismatch_total") >= 1.0);
    assert!(sample(&scrape(&paddr), "xce_alarms") >= 1.0);
    // The diverged node: marked, refusing, saying why — and still after a restart.
    for round in ["at once", "after a restart"] {
        ctrl.wait_until(
            &format!("node {v} says it diverged ({round})"),
            STARTUP,
            || {
                let i = hello_of(&ctrl, v);
                i.role == ControllerRole::Initializing
                    && i.alarms.iter().any(|a| a.contains("this node diverged"))
            },
        );
        assert!(vdir.join("diverged").exists());
        let r = Client::try_connect(&ctrl.clients[&v], STARTUP)
            .expect("the diverged node's client port")
            .call(Op::ResList);
        assert_eq!(r.status, -xce::error::E_XCE_NOT_READY, "{r:?}");
        if round == "at once" {
            ctrl.kill9(v);
            ctrl.start_node(v);
        }
    }
    // The others serve on (a write needs both of them now).
    let p = ctrl.wait_primary_among(
        &[1u64, 2, 3]
            .into_iter()
            .filter(|&i| i != v)
            .collect::<Vec<_>>(),
        STARTUP,
    );
    ctrl.client(p).ok(submit(5_000, "alice", ""));
    // Its raft port refuses the primary's appends, and the primary says so.
    assert!(
        ctrl.logged(p, "refused this node's message: this node's state diverged"),
        "no refusal logged:\n{}",
        ctrl.log(p)
    );

    // The repair: an empty data directory, rejoined as a blank node.
    ctrl.kill9(v);
    std::fs::remove_dir_all(&vdir).unwrap();
    let client = ctrl.clients[&v].clone();
    let spec = ctrl.spec.clone();
    ctrl.start_extra_node(v, &client, &spec, &["--join"]);
    ctrl.wait_until(
        "the repaired node agrees and the alarm is gone",
        STARTUP * 2,
        || {
            let c = check(&ctrl, p);
            c.alarms.is_empty() && hello_of(&ctrl, v).alarms.is_empty()
        },
    );
    let j = job(ctrl.client(p).ok(Op::JobInfo { job_id: 5_000 }));
    assert_eq!(j.job_id, 5_000);
    assert!(!vdir.join("diverged").exists());
}

/// The primary itself in the minority: both standbys' states were changed the same way (so
/// they are the majority), and the primary stops leading; one of them leads and reports the
/// old primary as diverged. And when no digest has a majority (the standbys changed two
/// different ways), nobody is stopped and the alarm says so.
#[test]
fn a_primary_in_the_minority_stops_leading_and_no_majority_stops_nobody() {
    for same in [true, false] {
        let mut ctrl = Ctrl::start(3, &["--snapshot-logs", "10"]);
        let p = ctrl.wait_settled(STARTUP);
        fill(&ctrl, p, 1_000, 40);
        let standbys: Vec<u64> = [1u64, 2, 3].into_iter().filter(|&i| i != p).collect();
        for &s in &standbys {
            let d = ctrl.dir.path().join(format!("data-{s}"));
            ctrl.wait_until("a standby's snapshot", STARTUP, || {
                d.join("snapshot.bin").exists()
            });
        }
        let first = check(&ctrl, p);
        assert!(first.alarms.is_empty(), "{:?}", first.alarms);
        // Kill both, change them, start them: the primary keeps its role (they follow it
        // again; its vote is the highest).
        for (k, &s) in standbys.iter().enumerate() {
            ctrl.kill9(s);
            let to = if same { 33 } else { 33 + k as u8 };
            corrupt_snapshot(&ctrl.dir.path().join(format!("data-{s}")), to);
        }
        for &s in &standbys {
            ctrl.start_node(s);
        }
        if same {
            ctrl.wait_until(
                "the old primary marks itself diverged",
                FOUND_WITHIN * 2,
                || ctrl.dir.path().join(format!("data-{p}/diverged")).exists(),
            );
            let q = ctrl.wait_primary_among(&standbys, STARTUP);
            assert!(ctrl.logged(p, &format!("node {p} diverged (C19)")));
            // Asked strictly: a diverged node answers `hello` with its info.
            let i = info(&ctrl.client(p).call(hello()));
            assert_eq!(i.role, ControllerRole::Initializing, "{i:?}");
            ctrl.wait_until("the new primary reports the old one", STARTUP, || {
                check(&ctrl, q)
                    .alarms
                    .iter()
                    .any(|a| a.starts_with(&format!("node {p}: diverged at index")))
            });
            ctrl.client(q).ok(submit(9_000, "bob", ""));
        } else {
            let mut alarms = Vec::new();
            ctrl.wait_until("an alarm without a majority", FOUND_WITHIN * 2, || {
                let p = ctrl.wait_primary(STARTUP);
                alarms = hello_of(&ctrl, p).alarms;
                alarms
                    .iter()
                    .any(|a| a.contains("no digest has a majority"))
            });
            for id in 1..=3u64 {
                assert!(
                    !ctrl.dir.path().join(format!("data-{id}/diverged")).exists(),
                    "node {id} was stopped without a majority: {alarms:?}"
                );
            }
        }
    }
}
