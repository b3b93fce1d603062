//! The test harness itself: when a wait for a primary fails, the message says what became of
//! each node (a controller that exited on its own, e.g. because its port was taken, reads
//! otherwise like an election that never ends).

mod common;

use std::time::{Duration, Instant};

#[test]
fn report_names_a_node_that_died_outside_the_harness() {
    let (mut c, p) = common::cluster(3);
    let pid = c.node(p).pid().expect("the primary runs");
    // SAFETY: kill(2) on the pid of a child the harness spawned and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    let report = loop {
        let r = c.report();
        if r.contains("EXITED") || Instant::now() >= deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        report.contains(&format!("node {p}: EXITED on its own: signal: 9")),
        "{report}"
    );
    for id in (1..=3).filter(|&id| id != p) {
        assert!(
            report.contains(&format!("node {id}: running, answers")),
            "{report}"
        );
    }
    // Reaped by the report: the harness no longer counts it as running.
    assert!(c.report().contains(&format!("node {p}: not running")));
}
