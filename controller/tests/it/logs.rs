//! Issue 26 item 6: a node's log lines with levels and a JSON format. `--log-format json`:
//! every line one object with stable fields (`ts`, `level`, `source`, `msg`); `--log-level
//! warn` drops the info lines; `--log-file` writes to a file instead of stderr.

use crate::common::*;

#[test]
fn json_lines_parse_and_levels_filter() {
    let ctrl = cluster(1, &["--log-format", "json"]);
    ctrl.expect_settled(STARTUP);
    ctrl.wait_until("the node logs that it serves", STARTUP, || {
        ctrl.logged(1, "serving as primary")
    });
    let log = ctrl.log(1);
    let mut n = 0;
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
        assert!(
            ["error", "warn", "info", "debug"].contains(&v["level"].as_str().unwrap()),
            "{line}"
        );
        assert_eq!(v["source"], "node 1", "{line}");
        assert!(v["msg"].as_str().is_some(), "{line}");
        n += 1;
    }
    assert!(n >= 3, "{log}");

    // warn and above only, to a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.log");
    let file_s = file.display().to_string();
    let quiet = cluster(1, &["--log-level", "warn", "--log-file", &file_s]);
    quiet.expect_settled(STARTUP);
    // The node served: an info line it would have written is not there (nor on stderr).
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(!text.contains("role=primary"), "{text}");
    assert!(!quiet.log(1).contains("role=primary"), "{}", quiet.log(1));
}

/// Issue 36: `--log-level debug` adds lines (each request, each client connection: before, it
/// added nothing); SIGHUP reopens `--log-file` (logrotate's convention) and the node lives on
/// (before: exit 129, no handover, no line).
#[test]
fn debug_lines_and_sighup_reopens_the_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.log");
    let file_s = file.display().to_string();
    let ctrl = cluster(1, &["--log-level", "debug", "--log-file", &file_s]);
    ctrl.expect_settled(STARTUP);
    let mut c = ctrl.client(1);
    c.ok(hello());
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    ctrl.wait_until("a debug line for the hello", STARTUP, || {
        read().contains("DEBUG node 1: 127.0.0.1:") && read().contains(": hello (seq ")
    });
    assert!(
        read().contains("DEBUG node 1: client 127.0.0.1:"),
        "{}",
        read()
    );

    // Rotated: the file moved away, SIGHUP; the node writes to a new file at the old path.
    let rotated = dir.path().join("node.log.1");
    std::fs::rename(&file, &rotated).unwrap();
    ctrl.signal(1, libc::SIGHUP);
    ctrl.wait_until("the reopened file's first line", STARTUP, || {
        read().contains("SIGHUP: log file reopened")
    });
    c.ok(hello());
    ctrl.wait_until("a later line in the new file", STARTUP, || {
        read().matches(": hello (seq ").count() >= 1
    });
    assert!(
        !std::fs::read_to_string(&rotated)
            .unwrap()
            .contains("SIGHUP"),
        "the rotated file got the new lines"
    );
    assert_eq!(ctrl.running(), vec![1], "SIGHUP ended the node");
    assert_eq!(c.call(hello()).status, 0, "the node serves on");
}

/// Issue 36: a standby gone is logged by the primary (before: 0 lines after `kill -9`), and
/// its return.
#[test]
fn the_primary_logs_a_silent_member_and_its_return() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    let s = (1..=3).find(|&i| i != p).unwrap();
    ctrl.kill(s);
    ctrl.wait_until("the primary logs the silent member", STARTUP, || {
        ctrl.logged(p, &format!("member {s} has not answered for 5 s"))
    });
    ctrl.start_node(s);
    ctrl.wait_until("the primary logs its return", STARTUP, || {
        ctrl.logged(p, &format!("member {s} answers again"))
    });
}
