//! Failover scenarios S1–S8 and S10 of acceptance.md, against real `xce-controller` processes
//! on loopback (S9, the hostile peer, is in `hostile_peer.rs`). Each test starts its own
//! cluster, bounds every wait, and cleans up on drop. `XCE_LONG=1` runs the long versions.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use xce::wire::JobFilter;
use xce::Error;

/// S1, the brief's reproduction: jobs submitted and listed; kill -9 the primary; a client with
/// a budget shorter than the election gets "cluster not ready"; a default-budget client blocks
/// and then succeeds against the new primary, with the jobs submitted before the kill. Never
/// EINVAL, never stale output.
#[test]
fn s1_kill_primary_not_ready_then_transparent() {
    let (mut c, primary) = cluster(3);
    let patient = client(&c);
    let hasty = client(&c);
    hasty.set_retry_config(Some(short_budget())).unwrap();

    let mut submitted = Vec::new();
    for i in 0..5 {
        submitted.push(patient.jobsubmit(spec(&format!("s1-{i}"))).expect("submit"));
    }
    assert_eq!(sorted(all_job_ids(&hasty)), sorted(submitted.clone()));

    c.kill(primary);
    let t_kill = Instant::now();
    // The election takes hundreds of ms: the short budget (two 10–20 ms sleeps) ends first.
    let err = hasty
        .joblist(JobFilter::default())
        .expect_err("hasty joblist during election");
    assert_eq!(
        err,
        Error::NotReady,
        "short budget must say cluster not ready"
    );
    assert_eq!(err.to_string(), "cluster not ready");
    let report = hasty.last_error().expect("a last-error report");
    eprintln!("S1 hasty client: {report}");

    let jobs = patient
        .joblist(JobFilter::default())
        .expect("patient joblist across failover");
    eprintln!(
        "S1 patient client recovered {:?} after the kill",
        t_kill.elapsed()
    );
    assert_eq!(
        sorted(jobs.iter().map(|j| j.job_id).collect()),
        sorted(submitted)
    );
    let new_primary = c.primary_now();
    assert!(new_primary.is_some() && new_primary != Some(primary));
    // The hasty client works again once a primary exists: no sticky error state (F9).
    assert_eq!(
        hasty
            .joblist(JobFilter::default())
            .expect("hasty after election")
            .len(),
        5
    );
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}
