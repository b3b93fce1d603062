//! `xce-controller status --masters LIST` (C18) against a real cluster: every member's role,
//! term and progress, the primary; and NO QUORUM (exit 1) when a majority is gone.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Runs `status` (bounded by its own per-master timeout): (exit code, stdout).
fn status(masters: &str) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["status", "--masters", masters, "--timeout-ms", "3000"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The member line of `addr` split into columns.
fn row<'a>(out: &'a str, addr: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(addr))
        .unwrap_or_else(|| panic!("no line for {addr}:\n{out}"))
        .split_whitespace()
        .collect()
}

#[test]
fn status_shows_members_primary_and_no_quorum() {
    let mut ctrl = Ctrl::start(3, &[]);
    let p = ctrl.wait_settled(STARTUP);
    let mut c = ctrl.client(p);
    for i in 0..5 {
        assert_eq!(c.call(submit(1000 + i, "u", "")).status, 0);
    }
    let masters = ctrl.clients.values().cloned().collect::<Vec<_>>().join(",");

    // Followers apply what the primary committed within a heartbeat or so: wait for lag 0.
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let (code, out) = status(&masters);
        assert_eq!(code, Some(0), "{out}");
        let settled = ctrl
            .clients
            .values()
            .all(|a| row(&out, a).get(7) == Some(&"0"));
        if settled {
            break out;
        }
        assert!(Instant::now() < deadline, "lag never 0:\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.starts_with("MASTER"), "{out}");
    assert!(
        out.contains(&format!("primary: node {p} ({}), term", ctrl.clients[&p])),
        "{out}"
    );
    for (&id, a) in &ctrl.clients {
        let r = row(&out, a);
        assert_eq!(r[1], id.to_string(), "{out}");
        assert_eq!(r[2], if id == p { "primary" } else { "standby" }, "{out}");
        let (log, commit, applied): (u64, u64, u64) = (
            r[4].parse().unwrap(),
            r[5].parse().unwrap(),
            r[6].parse().unwrap(),
        );
        assert!(
            log >= 6 && commit >= 6 && applied >= 6,
            "5 writes + the first entry:\n{out}"
        );
        assert!(
            r[8].parse::<u64>().is_ok() && r[9] == "ms",
            "last contact:\n{out}"
        );
    }

    // A list that leaves a member out: the primary names it, and it is shown too.
    let (code, out) = status(&ctrl.clients[&p]);
    assert_eq!(code, Some(0), "{out}");
    for a in ctrl.clients.values() {
        row(&out, a);
    }
    assert!(out.contains("3 of 3 members answer"), "{out}");

    // Two of three gone: no quorum, said clearly, exit 1; the dead ones are unreachable.
    let dead: Vec<u64> = [1, 2, 3].into_iter().filter(|&i| i != p).collect();
    ctrl.kill9(p);
    ctrl.kill9(dead[0]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, out) = status(&masters);
        if code == Some(1) {
            assert!(out.contains("NO QUORUM"), "{out}");
            assert!(out.contains("1 of 3 members answer"), "{out}");
            assert!(
                row(&out, &ctrl.clients[&p]).contains(&"unreachable:"),
                "{out}"
            );
            break;
        }
        // The survivor may still name the dead primary for an election timeout.
        assert!(Instant::now() < deadline, "still a primary:\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A usage error is exit 2.
    let (code, out) = status("");
    assert_eq!(code, Some(2), "{out}");
}
