//! C15 (amended): the adaptive lease at its bounds, with real controller processes on loopback.
//! The failpoint `pace-lease-ms` sets a node's adaptive lease (within election-max and the
//! ceiling); the primary is frozen (SIGSTOP) while the others elect a new one and change a job,
//! then resumed with a read already queued: whatever the two sides' adaptive values, the old
//! primary never answers that read — or any read after it — with the state from before the
//! change (the lease argument of docs/controller.md, "Adaptive timing").

use std::time::Duration;

use crate::common::*;

/// The ceiling the tests run with: well above election-max, short enough for a test.
const CEILING_MS: u64 = 2000;

fn adaptive_cluster() -> Cluster {
    cluster(
        3,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--election-ceiling-ms",
            &CEILING_MS.to_string(),
        ],
    )
}

/// Sets node `id`'s adaptive lease to `ms` and waits until its metrics say so (`want`: the
/// value within the bounds).
fn set_lease(ctrl: &Cluster, id: u32, ms: u64, want: f64) {
    ctrl.fail_set(id, "pace-lease-ms", &format!("return({ms})"));
    ctrl.wait_until(
        &format!("node {id}'s adaptive lease at {want} s"),
        STARTUP,
        || ctrl.metric(id, "xce_adaptive_lease_seconds") == Some(want),
    );
}

/// The primary `p` at `primary_ms`, the others at `others_ms`: freeze `p`, change job 5 on the
/// new primary, resume `p` with a read queued; no read `p` answers shows job 5 unchanged.
fn no_stale_read(primary_ms: u64, others_ms: u64) {
    let ctrl = adaptive_cluster();
    let p = ctrl.expect_settled(STARTUP);
    let bound = |ms: u64| ms.clamp(120, CEILING_MS) as f64 / 1000.0;
    set_lease(&ctrl, p, primary_ms, bound(primary_ms));
    for s in others(&[1, 2, 3], p) {
        set_lease(&ctrl, s, others_ms, bound(others_ms));
    }
    // The standbys wait out their own (stretched) lease and timeout: up to 3 × the ceiling.
    deposed_reads_are_fresh(
        &ctrl,
        p,
        STARTUP + Duration::from_secs(6),
        &format!("its adaptive lease {primary_ms} ms, the others' {others_ms} ms"),
    );
}

/// The primary at the ceiling (it calls itself cut off only after 2 s), the standbys at the
/// floor (they elect after election-max plus a timeout).
#[test]
fn a_primary_at_the_ceiling_serves_no_stale_read() {
    no_stale_read(CEILING_MS, 0);
}

/// The standbys at the ceiling (they refuse pre-votes and wait 2 s plus a stretched timeout),
/// the primary at the floor.
#[test]
fn standbys_at_the_ceiling_and_a_primary_at_the_floor_serve_no_stale_read() {
    no_stale_read(0, CEILING_MS);
}

/// Beyond the ceiling is the ceiling, below the floor is the floor: what the failpoint asks
/// for is bounded as a measured value is.
#[test]
fn the_adaptive_lease_stays_within_its_bounds() {
    let ctrl = adaptive_cluster();
    let p = ctrl.expect_settled(STARTUP);
    set_lease(&ctrl, p, 60_000, CEILING_MS as f64 / 1000.0);
    set_lease(&ctrl, p, 1, 0.12);
    // Cleared, the measured value is back: off the ceiling the failpoint held it at (any
    // value within the bounds is a possible measurement, so the check is that it moves).
    set_lease(&ctrl, p, 60_000, CEILING_MS as f64 / 1000.0);
    ctrl.fail_clear(p, "pace-lease-ms");
    ctrl.wait_until(
        "the measured lease once the failpoint is cleared",
        STARTUP,
        || {
            ctrl.metric(p, "xce_adaptive_lease_seconds")
                .is_some_and(|l| l < CEILING_MS as f64 / 1000.0)
        },
    );
}
