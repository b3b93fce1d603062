//! S14 / C14 / P13: a rolling restart under load. 64 writing and 8 listing contexts run
//! while every controller is restarted in turn (SIGTERM, wait for the exit, start again),
//! primary last; the primary hands leadership to an up-to-date standby before it exits
//! (C14). No caller sees an error and every acknowledged job is listed once. The latencies
//! during the restarts and outside them are printed; their table (P13, side by side with
//! crash restarts or another build) is `xce-rolling`'s (see [`xce_proof::bench::p13_rolling`]).

use std::time::Duration;

use xce_proof::bench::p13_rolling;
use xce_proof::bench::plan::Plan;

#[test]
fn rolling_restart_costs_callers_no_error() {
    let log_dir = std::env::temp_dir().join(format!("xce-rolling-{}", std::process::id()));
    let plan = Plan {
        log_dir: Some(log_dir.clone()),
        ..p13_rolling::plan()
    };
    let r = p13_rolling::round(&plan).expect("rolling restart round");
    let s = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        let at = |p: f64| {
            v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
                .copied()
        };
        (v.len(), at(0.5), at(0.99), at(1.0))
    };
    eprintln!(
        "P13: calls outside the restarts (n, p50, p99, max) {:?}; during {:?}; {} errors {:?}; \
         {} acknowledged, {} missing, {} twice; handed over {} time(s)",
        s(&r.outside),
        s(&r.during),
        r.errors,
        r.error_samples,
        r.acked,
        r.missing,
        r.duplicated,
        r.handed_over
    );
    assert!(
        r.stuck.is_empty(),
        "nodes {:?} did not stop on SIGTERM",
        r.stuck
    );
    assert_eq!(
        r.errors, 0,
        "errors returned to callers: {:?}",
        r.error_samples
    );
    assert!(r.acked > 0, "nothing was written");
    assert_eq!(
        (r.missing, r.duplicated),
        (0, 0),
        "acknowledged jobs missing / listed twice"
    );
    // Once, by the primary restarted last; twice if leadership moved during the round (a
    // restarted standby may lead when its turn comes and then hands over too).
    assert!(
        r.handed_over >= 1,
        "no primary handed leadership over (see {})",
        log_dir.display()
    );
    let _ = std::fs::remove_dir_all(&log_dir);
}
