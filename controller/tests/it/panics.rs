//! C21 (issue 39): a panic anywhere ends the node. Before, a panic on any thread but the main
//! one ended that thread or task only: a node whose Raft core had panicked stayed up, answering
//! as a standby with no primary and voting in nothing, and a supervisor's
//! `Restart=on-failure` never fired. Now the node logs the panic once (message, place,
//! thread) and exits with status 70 (`EX_SOFTWARE`) at once; the others fail over as for a
//! crash, and the node restarted on its disk comes back.
//!
//! The panics are failpoints' `panic(MSG)` action at three kinds of places: openraft's apply
//! path (`sm-apply`, the state machine worker), a tokio task of the node's own (`task-tick`)
//! and a plain thread (`log-flush`, the leader's log flusher).

use std::time::{Duration, Instant};

use crate::common::*;

/// The exit status of a node ended by a panic (`base/crash.rs`).
const EXIT_SOFTWARE: i32 = 70;
/// Bound from the panic to the exit (the node exits at once; the bound is for a busy machine).
const EXIT_BOUND: Duration = Duration::from_secs(10);

/// Waits for node `id` to exit by itself after the panic `tag`: status 70, the panic logged
/// once with its thread and place. The time from `t0` to the exit seen.
fn ends_for_its_panic(ctrl: &mut Cluster, id: u32, tag: &str, t0: Instant) -> Duration {
    let log = exits_with(ctrl, id, EXIT_SOFTWARE, EXIT_BOUND);
    let took = t0.elapsed();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(tag) && l.contains("panic on thread"))
        .collect();
    assert_eq!(lines.len(), 1, "node {id} must log its panic once\n{log}");
    assert!(
        lines[0].contains("exits with status 70"),
        "node {id}'s panic line names its thread and the status: {}",
        lines[0]
    );
    took
}

#[test]
fn a_panic_anywhere_ends_the_node_and_the_cluster_fails_over() {
    let mut ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let mut job = 0u64;
    let mut next_job = || {
        job += 1;
        job
    };
    // (failpoint, where it panics, whether a write reaches it)
    let kinds = [
        ("sm-apply", "the state machine's apply", true),
        ("task-tick", "a tokio task", false),
        ("log-flush", "the log flusher thread", true),
    ];
    for (point, place, by_write) in kinds {
        let p = ctrl.expect_settled(STARTUP);
        let tag = format!("{point} panics here");
        ctrl.fail_set(p, point, &format!("panic({tag})"));
        let t0 = Instant::now();
        if by_write {
            let mut c = ctrl.client(p);
            c.set_timeout(Duration::from_secs(5));
            // The primary dies before it answers (or just after): no answer is expected.
            let _ = c.try_call(submit(next_job(), "u", ""));
        }
        let took = ends_for_its_panic(&mut ctrl, p, &tag, t0);
        eprintln!("{place}: node {p} exited with status 70 {took:?} after the panic's trigger");
        // Down, not a standby: `status` cannot reach it.
        let (_, out, _) = run_cli(
            &[
                "status",
                "--masters",
                &ctrl.masters(),
                "--timeout-ms",
                "3000",
            ],
            Duration::from_secs(20),
        );
        let row = out
            .lines()
            .find(|l| l.starts_with(&ctrl.addr(p)))
            .unwrap_or_else(|| panic!("no row for node {p}:\n{out}"));
        assert!(
            row.contains("unreachable"),
            "status of node {p}: {row}\n{out}"
        );
        // The others fail over as for a crash and take writes.
        let others: Vec<u32> = (1..=3).filter(|&i| i != p).collect();
        let q = ctrl.expect_primary_among(&others, STARTUP);
        ctrl.client(q).ok(submit(next_job(), "u", ""));
        // Restarted on its disk (as a supervisor would), it comes back.
        let starts = ctrl.starts(p);
        ctrl.start_node(p);
        ctrl.wait_until("the node's restart", STARTUP, || ctrl.starts(p) > starts);
    }
    let p = ctrl.expect_settled(STARTUP);
    let listed = listed_on(&ctrl, p).len();
    assert!(
        listed >= 3,
        "the writes after each failover are there: {listed}"
    );
}

/// The panic's report is the logger's: JSON when asked, in `--log-file` when given.
#[test]
fn a_panic_is_reported_in_the_logs_format_and_place() {
    let mut ctrl = prepared(1, &["--metrics", "127.0.0.1:0"]);
    let file = ctrl.data_dir().join("node-1.json");
    let (file_s, node) = (file.display().to_string(), 1);
    ctrl.opts.extra_args.extend(
        ["--log-format", "json", "--log-file", file_s.as_str()]
            .iter()
            .map(|s| s.to_string()),
    );
    ctrl.failpoints_at_start("task-tick=panic(a tick that panics)");
    let t0 = Instant::now();
    ctrl.start_node(node);
    let st = ctrl.wait_exit(node, EXIT_BOUND + STARTUP);
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(EXIT_SOFTWARE),
        "exit after {:?}\n{text}\n{}",
        t0.elapsed(),
        ctrl.log(node)
    );
    let panics: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.contains("a tick that panics") && l.contains("panic on thread"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(panics.len(), 1, "{text}");
    assert_eq!(panics[0]["level"], "error", "{text}");
    assert_eq!(panics[0]["source"], "node 1", "{text}");
    let msg = panics[0]["msg"].as_str().unwrap_or_default();
    assert!(msg.starts_with("panic on thread '"), "{msg}");
}
