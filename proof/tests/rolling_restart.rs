//! S14 / C14 / P13: a rolling restart under load. 64 writing and 8 listing contexts run
//! while every controller is restarted in turn (SIGTERM, wait for the exit, start again),
//! primary included; the primary hands leadership to an up-to-date standby before it exits
//! (C14). No caller sees an error, every acknowledged job is listed once, and the call
//! latencies during the restarts and outside them are printed (P13).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use xce::wire::JobFilter;
use xce_proof::ClusterOpts;

/// S14: contexts writing (`jobsubmit`) and listing (`joblist`) all along, 10 ms between calls.
const WRITERS: usize = 64;
const LISTERS: usize = 8;
/// A lister's page: the listing path (read barrier, snapshot, encoding) on every call, at a
/// cost that does not grow with the jobs written during the run (the final check lists all).
const LIST_LIMIT: u32 = 500;

#[derive(Clone, Copy)]
struct Call {
    invoked: Duration,
    took: Duration,
    ok: bool,
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn rolling_restart_costs_callers_no_error() {
    let log_dir = std::env::temp_dir().join(format!("xce-rolling-{}", std::process::id()));
    let (mut c, _) = cluster_with(
        3,
        ClusterOpts {
            extra_args: Vec::new(),
            log_dir: Some(log_dir.clone()),
        },
    );
    let masters = c.masters();
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for w in 0..WRITERS + LISTERS {
        let (stop, masters, acked) = (stop.clone(), masters.clone(), acked.clone());
        threads.push(std::thread::spawn(move || {
            let cl = client_for(&masters);
            let mut calls = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let invoked = origin.elapsed();
                let ok = if w < WRITERS {
                    let s = spec("rolling");
                    let r = cl.jobsubmit(s.clone());
                    if r.is_ok() {
                        acked.lock().unwrap().push(s.job_id);
                    }
                    r.map(|_| ())
                } else {
                    cl.joblist(JobFilter {
                        limit: LIST_LIMIT,
                        ..JobFilter::default()
                    })
                    .map(|_| ())
                };
                if let Err(e) = &ok {
                    eprintln!(
                        "call failed ({}): {e}; {:?}",
                        if w < WRITERS { "writer" } else { "lister" },
                        cl.last_error()
                    );
                }
                calls.push(Call {
                    invoked,
                    took: origin.elapsed() - invoked,
                    ok: ok.is_ok(),
                });
                std::thread::sleep(Duration::from_millis(10));
            }
            calls
        }));
    }

    std::thread::sleep(Duration::from_secs(2));
    let mut windows = Vec::new();
    let mut handed_over = 0;
    let p0 = c.wait_primary(ELECTION_WAIT).expect("a primary");
    // The primary last, so that it hands over to a standby restarted before it.
    let order: Vec<u32> = (1..=3).filter(|&i| i != p0).chain([p0]).collect();
    for id in order {
        let was_primary = c.primary_now() == Some(id);
        let start = origin.elapsed();
        let t0 = Instant::now();
        assert!(
            c.terminate(id, Duration::from_secs(10)),
            "node {id} did not stop"
        );
        let stopped = t0.elapsed();
        c.restart(id).expect("start again");
        eprintln!("node {id} (primary: {was_primary}) stopped in {stopped:?} and started again");
        std::thread::sleep(Duration::from_millis(1500));
        windows.push((start, origin.elapsed()));
        if was_primary {
            let log = std::fs::read_to_string(log_dir.join(format!("node-{id}.log"))).unwrap();
            if let Some(line) = log.lines().find(|l| l.contains("handed leadership over")) {
                eprintln!("{line}");
                handed_over += 1;
            }
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let calls: Vec<Call> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client"))
        .collect();

    let during = |c: &Call| {
        windows
            .iter()
            .any(|&(a, b)| c.invoked >= a && c.invoked < b)
    };
    let (inside, outside): (Vec<Call>, Vec<Call>) = calls.iter().partition(|c| during(c));
    let lat = |v: &[Call]| v.iter().map(|c| c.took).collect::<Vec<_>>();
    eprintln!(
        "P13: {WRITERS} writers, {LISTERS} listers, {:?} in all; {} calls outside the restarts: p50 {:?} p99 {:?} max {:?}; {} during: p50 {:?} p99 {:?} max {:?}; {} errors; handed over {handed_over} time(s)",
        origin.elapsed(),
        outside.len(),
        pct(lat(&outside), 0.5),
        pct(lat(&outside), 0.99),
        pct(lat(&outside), 1.0),
        inside.len(),
        pct(lat(&inside), 0.5),
        pct(lat(&inside), 0.99),
        pct(lat(&inside), 1.0),
        calls.iter().filter(|c| !c.ok).count()
    );
    assert_eq!(
        calls.iter().filter(|c| !c.ok).count(),
        0,
        "errors returned to callers"
    );
    let acked = acked.lock().unwrap().clone();
    // Paged when one frame would be too big (thousands of jobs per second were written).
    let listed: Vec<u64> = client(&c)
        .joblist_all(JobFilter::default())
        .expect("joblist_all")
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    let mut count: HashMap<u64, usize> = HashMap::new();
    for id in listed {
        *count.entry(id).or_default() += 1;
    }
    assert!(
        acked.iter().all(|id| count.get(id) == Some(&1)),
        "an acknowledged job missing or twice"
    );
    assert_eq!(
        handed_over,
        1,
        "the primary handed leadership over (see {})",
        log_dir.display()
    );
    c.stop_all(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&log_dir);
}
