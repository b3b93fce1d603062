//! C11 (amended): a primary restarted in place — SIGTERM and start again at once, or kill -9
//! and start within 0.1 s — serves nothing stale. Eight writer threads submit fresh job ids and
//! two lister threads list the whole table while the primary is restarted again and again;
//! the history is checked for linearizability (`xce_proof::check::linearizable`) and every
//! acknowledged job must be listed exactly once at the end.
//!
//! Snapshots are taken every 100 writes, so a restarted node's last snapshot is always behind
//! its log: a node that served from its state machine before replaying the committed log
//! would list jobs acknowledged long before as missing ("lost").

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use xce_proof::check::linearizable::{self, History, Read, Write};
use xce_proof::ClusterOpts;
use xce_proto::wire::JobFilter;

const WRITERS: usize = 8;
const LISTERS: usize = 2;

enum Calls {
    Writes(Vec<Write>),
    Reads(Vec<Read>),
}

#[test]
fn restarted_primary_serves_nothing_stale() {
    let rounds = if long() { 20 } else { 3 };
    // The node logs: printed if this fails, kept with XCE_CLUSTER_LOGS=DIR.
    let opts = ClusterOpts::args(&["--snapshot-logs", "100"]);
    let (mut c, _) = cluster_with(3, opts);
    let masters = c.masters();
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));

    let mut threads = Vec::new();
    for w in 0..WRITERS + LISTERS {
        let (stop, masters) = (stop.clone(), masters.clone());
        threads.push(std::thread::spawn(move || {
            let cl = client_for(&masters);
            if w < WRITERS {
                let mut writes = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let s = spec("restart");
                    let invoked = origin.elapsed();
                    let r = cl.jobsubmit(s.clone());
                    writes.push(Write {
                        id: s.job_id,
                        invoked,
                        completed: origin.elapsed(),
                        acked: r.is_ok(),
                    });
                    if let Err(e) = r {
                        eprintln!("jobsubmit: {e}");
                    }
                }
                Calls::Writes(writes)
            } else {
                let mut reads = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let invoked = origin.elapsed();
                    match cl.joblist(JobFilter::default()) {
                        Ok(jobs) => reads.push(Read {
                            invoked,
                            completed: origin.elapsed(),
                            ids: jobs.iter().map(|j| j.job_id).collect(),
                        }),
                        Err(e) => eprintln!("joblist: {e}"),
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Calls::Reads(reads)
            }
        }));
    }

    // Let the table grow past a few snapshots, then restart the primary in place, alternating
    // a clean stop (SIGTERM, wait for the exit) and a crash (kill -9), each started again at
    // once (a crash within 0.1 s).
    std::thread::sleep(Duration::from_millis(1500));
    for round in 0..2 * rounds {
        let p = c.wait_primary(ELECTION_WAIT).expect("a primary");
        let t0 = Instant::now();
        if round % 2 == 0 {
            assert!(
                c.terminate(p, Duration::from_secs(10)),
                "node {p} did not stop on SIGTERM"
            );
            c.restart(p).expect("start again");
            eprintln!(
                "round {round}: node {p} SIGTERM + start in {:?}",
                t0.elapsed()
            );
        } else {
            c.kill(p);
            c.restart(p).expect("start again");
            let took = t0.elapsed();
            eprintln!("round {round}: node {p} kill -9 + start in {took:?}");
            if took > Duration::from_millis(100) {
                eprintln!("round {round}: the restart took over 0.1 s (a loaded machine)");
            }
        }
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Relaxed);

    let mut history = History::default();
    for t in threads {
        match t.join().expect("client thread") {
            Calls::Writes(w) => history.writes.extend(w),
            Calls::Reads(r) => history.reads.extend(r),
        }
    }
    let final_ids: Vec<u64> = {
        let cl = client(&c);
        let invoked = origin.elapsed();
        let ids = all_job_ids(&cl);
        history.reads.push(Read {
            invoked,
            completed: origin.elapsed(),
            ids: ids.clone(),
        });
        ids
    };
    let acked: Vec<u64> = history
        .writes
        .iter()
        .filter(|w| w.acked)
        .map(|w| w.id)
        .collect();
    let failed = history.writes.len() - acked.len();
    eprintln!(
        "{} writes acknowledged, {failed} failed, {} listings, {} jobs at the end",
        acked.len(),
        history.reads.len(),
        final_ids.len()
    );
    let (missing, twice) = lost_and_twice(&acked, &final_ids);
    let verdict = linearizable::check(&history);
    if let Err(v) = &verdict {
        for v in v {
            eprintln!("violation: {v}");
        }
    }
    assert!(
        verdict.is_ok() && missing.is_empty() && twice.is_empty(),
        "not linearizable ({} violations), {} acknowledged jobs missing, {} listed twice",
        verdict.as_ref().err().map_or(0, Vec::len),
        missing.len(),
        twice.len(),
    );
    c.stop_all(Duration::from_secs(5));
}
