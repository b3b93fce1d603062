//! Issue 26 (C17): membership changes fail fast when something is wrong, and `member list`
//! answers from a standby. `member add` of a node at a wrong address — another cluster's node,
//! nothing listening — fails within 10 s with the reason (the primary logs it) and leaves the
//! membership as it was, no learner behind (before: more than 60 s, "outcome unknown", a
//! re-send, and a learner left behind). `member list` asked of one standby answers at once
//! (before: 53 s, then "cluster not ready"), with reachability and lag per member.

mod common;

use std::time::{Duration, Instant};

use common::*;

const CLI_TIMEOUT: Duration = Duration::from_secs(100);

fn member(masters: &str, args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut all = vec!["member"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--masters", masters]);
    let t0 = Instant::now();
    let (code, out, err) = run_cli(&all, CLI_TIMEOUT);
    (code, out + &err, t0.elapsed())
}

/// The member lines of `member list`: (id, the rest).
fn listed(out: &str) -> Vec<(u64, String)> {
    out.lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(' ')?;
            Some((id.parse().ok()?, rest.to_string()))
        })
        .collect()
}

#[test]
fn member_add_to_a_wrong_address_fails_fast_and_changes_nothing() {
    let ctrl = Ctrl::start(3, &[]);
    let p = ctrl.wait_settled(STARTUP);
    let masters = ctrl.clients.values().cloned().collect::<Vec<_>>().join(",");
    // Another cluster's node: a 1-node cluster of its own.
    let other = Ctrl::start(1, &[]);
    other.wait_settled(STARTUP);
    let (oc, or) = (other.clients[&1].clone(), other.raft_addr(1));
    let spec = format!("4={oc}/{or}");
    let (code, out, took) = member(&masters, &["add", &spec]);
    eprintln!("another cluster's node: {took:?}: {out}");
    assert_eq!(code, Some(1), "{out}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(out.contains("nothing was changed"), "{out}");
    // The primary says why.
    ctrl.wait_until("the primary logs the reason", STARTUP, || {
        ctrl.logged(p, "member add 4=") && ctrl.logged(p, "node 4 at ")
    });

    // Nothing listening there.
    let ports = free_ports(2);
    let spec = format!("5=127.0.0.1:{}/127.0.0.1:{}", ports[0], ports[1]);
    let (code, out, took) = member(&masters, &["add", &spec]);
    eprintln!("nothing listening: {took:?}: {out}");
    assert_eq!(code, Some(1), "{out}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(out.contains("cannot reach"), "{out}");

    // The membership is as it was: three voters, no learner.
    let (code, out, _) = member(&masters, &["list"]);
    assert_eq!(code, Some(0), "{out}");
    let ids: Vec<u64> = listed(&out).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, vec![1, 2, 3], "{out}");
    assert!(!out.contains("learner"), "{out}");
}

#[test]
fn member_list_via_a_standby_answers_with_reachability_and_lag() {
    let mut ctrl = Ctrl::start(3, &[]);
    let p = ctrl.wait_settled(STARTUP);
    let standby = (1..=3).find(|&i| i != p).unwrap();
    let (code, out, took) = member(&ctrl.clients[&standby], &["list"]);
    eprintln!("via standby {standby}: {took:?}:\n{out}");
    assert_eq!(code, Some(0), "{out}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let rows = listed(&out);
    assert_eq!(rows.len(), 3, "{out}");
    for (id, rest) in &rows {
        assert!(rest.contains("reachable lag"), "{out}");
        let role = if *id == p { "primary" } else { "voter" };
        assert!(rest.contains(role), "node {id}: {out}");
    }
    // A dead voter is shown unreachable, not as an ordinary voter.
    let dead = (1..=3).find(|&i| i != p && i != standby).unwrap();
    ctrl.kill9(dead);
    let (code, out, _) = member(&ctrl.clients[&standby], &["list"]);
    assert_eq!(code, Some(0), "{out}");
    let row = listed(&out)
        .into_iter()
        .find(|(id, _)| *id == dead)
        .unwrap();
    assert!(row.1.contains("unreachable"), "{out}");
}
