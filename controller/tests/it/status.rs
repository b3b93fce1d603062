//! `xce-controller status --masters LIST` (C18, amended by issue 26) against real clusters: a
//! health check a monitor can use. Each node alone of a healthy cluster says healthy (exit 0);
//! one killed: degraded (1); two killed: no quorum (2); two clusters behind one list: flagged,
//! cannot tell (3); one node under two names counted once; `--json` parses; TLS failures named.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// Runs `status` (bounded by its own per-master timeout): (exit code, stdout + stderr).
fn status(masters: &str, more: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["status", "--masters", masters, "--timeout-ms", "3000"])
        .args(more)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `status --json`: (exit code, the object).
fn status_json(masters: &str, more: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(more);
    let (code, out) = status(masters, &args);
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(v["exit"].as_i64(), code.map(i64::from), "{v}");
    (code, v)
}

/// Asks until `status` of `masters` (with `more` flags) exits `want`, within `within`: the last
/// output.
fn until_exit(masters: &str, more: &[&str], want: i32, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (code, out) = status(masters, more);
        if code == Some(want) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "status of {masters} never exited {want} (last {code:?}):\n{out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
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
fn a_monitor_asking_one_node_at_a_time_sees_healthy_degraded_no_quorum() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(p);
    for i in 0..5 {
        assert_eq!(c.call(submit(1000 + i, "u", "")).status, 0);
    }
    ctrl.cluster_id();
    let masters = ctrl.masters();

    // Each node alone — standbys too — answers for the whole cluster: healthy, exit 0.
    for id in ctrl.ids() {
        let a = &ctrl.addr(id);
        let out = until_exit(a, &[], 0, Duration::from_secs(10));
        assert!(out.contains("health: healthy (exit 0)"), "{out}");
        assert!(
            out.contains("3 of 3 members answer"),
            "node {id} alone:\n{out}"
        );
        assert!(
            out.contains(&format!("primary: node {p} ({}), term", ctrl.addr(p))),
            "{out}"
        );
        let (code, v) = status_json(a, &[]);
        assert_eq!(code, Some(0), "{v}");
        assert_eq!(v["health"], "healthy", "{v}");
        assert_eq!(v["primary"]["id"].as_u64(), Some(p.into()), "{v}");
        let nodes = v["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "{v}");
        for n in nodes {
            assert_eq!(n["reachable"], true, "{v}");
            assert!(n["version"].as_str().unwrap().starts_with("0."), "{v}");
            assert!(n["uptime_ms"].as_u64().unwrap() > 0, "{v}");
            for k in ["db_size_bytes", "disk_free_bytes", "quota_bytes"] {
                assert!(n[k].as_u64().unwrap() > 0, "{k}: {v}");
            }
            assert_eq!(n["leader"].as_u64(), Some(p.into()), "{v}");
        }
    }

    // The table: every member's columns, lag 0 once followers applied (wait for it).
    let mut out = String::new();
    ctrl.wait_until("lag 0 on every member", Duration::from_secs(10), || {
        let code;
        (code, out) = status(&masters, &[]);
        assert_eq!(code, Some(0), "{out}");
        ctrl.ids()
            .into_iter()
            .all(|id| row(&out, &ctrl.addr(id)).get(8) == Some(&"0"))
    });
    for id in ctrl.ids() {
        let r = row(&out, &ctrl.addr(id));
        assert_eq!(r[1], id.to_string(), "{out}");
        assert_eq!(r[2], if id == p { "primary" } else { "standby" }, "{out}");
        assert_eq!(r[4], p.to_string(), "the leader it follows:\n{out}");
        let (log, commit, applied): (u64, u64, u64) = (
            r[5].parse().unwrap(),
            r[6].parse().unwrap(),
            r[7].parse().unwrap(),
        );
        assert!(log >= 6 && commit >= 6 && applied >= 6, "{out}");
        assert!(r[9].parse::<u64>().is_ok() && r[10] == "ms", "{out}");
        // C24 (issue 36): the data directory's size and its filesystem's free space.
        for (k, what) in [(12, "DB"), (13, "FREE")] {
            assert!(
                r[k].ends_with(['K', 'M', 'G', 'T'])
                    && r[k][..r[k].len() - 1].parse::<f64>().is_ok(),
                "{what}:\n{out}"
            );
        }
        assert!(r[14].starts_with("0."), "version:\n{out}");
    }

    // One node under two names (localhost and 127.0.0.1) is one member: 3 of 3, not 4 of 4.
    let port1 = ctrl.addr(1).rsplit_once(':').unwrap().1.to_string();
    let twice = format!("localhost:{port1},127.0.0.1:{port1}");
    let out = until_exit(&twice, &[], 0, Duration::from_secs(10));
    assert!(out.contains("3 of 3 members answer"), "{out}");
    let rows = out.lines().filter(|l| {
        l.split(',')
            .any(|a| a.ends_with(&port1) || a.contains(&format!("{port1} ")))
    });
    assert_eq!(
        rows.filter(|l| !l.starts_with("primary:")).count(),
        1,
        "{out}"
    );

    // One standby killed: each survivor alone says degraded (exit 1), naming the dead one.
    let dead = if p == 1 { 2 } else { 1 };
    ctrl.kill(dead);
    for id in [1, 2, 3].into_iter().filter(|&i| i != dead) {
        let out = until_exit(&ctrl.addr(id), &[], 1, Duration::from_secs(10));
        assert!(out.contains("health: degraded (exit 1)"), "{out}");
        assert!(
            out.contains(&format!(
                "node {dead} ({}) does not answer",
                ctrl.addr(dead)
            )),
            "{out}"
        );
        assert!(out.contains("2 of 3 members answer"), "{out}");
    }

    // Two of three gone: no quorum (exit 2) from the survivor alone.
    let survivor = [1, 2, 3]
        .into_iter()
        .find(|&i| i != dead && i != p)
        .unwrap();
    ctrl.kill(p);
    let out = until_exit(&ctrl.addr(survivor), &[], 2, Duration::from_secs(15));
    assert!(out.contains("NO QUORUM"), "{out}");
    assert!(out.contains("1 of 3 members answer"), "{out}");
    assert!(out.contains("health: no quorum (exit 2)"), "{out}");
    assert!(!out.contains("(:0)"), "{out}");
    let (code, v) = status_json(&ctrl.addr(survivor), &[]);
    assert_eq!(
        (code, v["health"].as_str()),
        (Some(2), Some("no quorum")),
        "{v}"
    );

    // Nothing answers: cannot tell (3). A usage error is 3 as well.
    ctrl.kill(survivor);
    let (code, out) = status(&masters, &[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("cannot tell"), "{out}");
    let (code, out) = status("", &[]);
    assert_eq!(code, Some(3), "{out}");
}

#[test]
fn two_clusters_behind_one_list_are_flagged() {
    let a = cluster(1, &[]);
    let b = cluster(1, &[]);
    a.expect_settled(STARTUP);
    b.expect_settled(STARTUP);
    let (ida, idb) = (a.cluster_id(), b.cluster_id());
    assert_ne!(ida, idb);
    let both = format!("{},{}", a.addr(1), b.addr(1));
    let (code, out) = status(&both, &[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("TWO CLUSTERS"), "{out}");
    // Both primaries are named, each with its cluster.
    assert_eq!(
        out.matches("primary: node 1 of cluster").count(),
        2,
        "{out}"
    );
    let (code, v) = status_json(&both, &[]);
    assert_eq!(
        (code, v["health"].as_str()),
        (Some(3), Some("cannot tell")),
        "{v}"
    );
}

#[test]
fn tls_failures_are_named_not_no_quorum() {
    let (certs, ctrl, _) = tls_cluster(1, 1, &[]);
    let other = tempfile::tempdir().unwrap();
    make_pki(other.path(), 1);
    let addr = ctrl.addr(1).clone();
    let admin_of = |d| identity_args(d, "admin");
    let id = admin_of(certs.path());
    let id: Vec<&str> = id.iter().map(String::as_str).collect();
    let out = until_exit(&addr, &id, 0, STARTUP);
    assert!(out.contains("health: healthy"), "{out}");

    // No CA: the port speaks TLS, said so; not NO QUORUM.
    let (code, out) = status(&addr, &[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("TLS failure") && out.contains("the port speaks TLS"),
        "{out}"
    );
    assert!(
        !out.contains("NO QUORUM") && !out.contains("protocol error"),
        "{out}"
    );

    // Another cluster's CA (and identity): the node's certificate is not signed by it.
    let id = admin_of(other.path());
    let (code, out) = status(&addr, &id.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("not signed by the CA given"), "{out}");
    assert!(!out.contains("NO QUORUM"), "{out}");

    // A CA file that is not there: named, cannot tell.
    let (code, out) = status(&addr, &["--ca", "/nonexistent/ca.pem"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("TLS files"), "{out}");
}
