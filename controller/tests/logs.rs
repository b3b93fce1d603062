//! Issue 26 item 6: a node's log lines with levels and a JSON format. `--log-format json`:
//! every line one object with stable fields (`ts`, `level`, `source`, `msg`); `--log-level
//! warn` drops the info lines; `--log-file` writes to a file instead of stderr.

mod common;

use common::*;

#[test]
fn json_lines_parse_and_levels_filter() {
    let ctrl = Ctrl::start(1, &["--log-format", "json"]);
    ctrl.wait_settled(STARTUP);
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
    let quiet = Ctrl::start(1, &["--log-level", "warn", "--log-file", &file_s]);
    quiet.wait_settled(STARTUP);
    // The node served: an info line it would have written is not there (nor on stderr).
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(!text.contains("role=primary"), "{text}");
    assert!(!quiet.log(1).contains("role=primary"), "{}", quiet.log(1));
}
