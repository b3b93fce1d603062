//! P10: no false suspicion (F25). A healthy primary serves 10,000-job `joblist`s to several
//! contexts while writers keep it busy: every late-reply probe (a suspicion) is counted, and
//! none may end in a failover (the late request abandoned for another primary).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce::client::Client;
use xce_proto::wire::{JobFilter, JobSpec};

use super::steady::lib_client;
use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};

/// Jobs in the table the readers list whole.
pub const JOBS: usize = 10_000;

fn spec(i: usize) -> JobSpec {
    JobSpec {
        name: format!("p10-{i}"),
        user: "bench".into(),
        queue: String::new(),
        command: format!("/usr/bin/simulate --case {i} --steps 1000"),
        ncpus: 1,
        mem_mb: 64,
        job_id: 0,
    }
}

/// Submits `n` jobs over `threads` contexts.
fn fill(masters: &str, n: usize, threads: usize) -> Result<(), String> {
    let next = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let masters = masters.to_string();
            let next = next.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let c = lib_client(&masters)?;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= n {
                        return Ok(());
                    }
                    c.jobsubmit(spec(i)).map_err(|e| format!("fill: {e}"))?;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "fill thread panicked")??;
    }
    Ok(())
}

/// What one reader saw: its listings' latencies, its context's suspicions and failovers.
struct Reader {
    latencies: Vec<Duration>,
    suspicions: u64,
    suspicion_failovers: u64,
    rotations: u64,
    errors: u64,
}

/// P10: the table filled, then writers and readers together for 10 s (40 s in full mode).
pub fn run(opts: &BenchOpts) -> Result<Table, String> {
    let (cluster, _) = opts.start_cluster()?;
    let masters = cluster.masters();
    let t0 = Instant::now();
    fill(&masters, JOBS, 16)?;
    let fill_s = t0.elapsed().as_secs_f64();
    let secs = opts.pick(10, 40);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| writer(&masters, w, &stop, &writes))
        .collect();
    let readers: Vec<_> = (0..4).map(|_| reader(&masters, &stop)).collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let mut all = vec![];
    for h in readers {
        all.push(h.join().map_err(|_| "reader panicked")??);
    }
    for h in writers {
        let _ = h.join();
    }
    table(&all, writes.load(Ordering::Relaxed), secs, fill_s)
}

/// The load: writer `w` submitting as fast as the primary takes them, counting in `writes`.
fn writer(
    masters: &str,
    w: usize,
    stop: &Arc<AtomicBool>,
    writes: &Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    let (masters, stop, writes) = (masters.to_string(), stop.clone(), writes.clone());
    std::thread::spawn(move || {
        let Ok(c) = lib_client(&masters) else { return };
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            if c.jobsubmit(spec(JOBS + w * 1_000_000 + i)).is_ok() {
                writes.fetch_add(1, Ordering::Relaxed);
            }
            i += 1;
        }
    })
}

/// A reader listing the whole table back to back until `stop`.
fn reader(
    masters: &str,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<Reader, String>> {
    let (masters, stop) = (masters.to_string(), stop.clone());
    std::thread::spawn(move || -> Result<Reader, String> {
        let c: Client = lib_client(&masters)?;
        let mut r = Reader {
            latencies: vec![],
            suspicions: 0,
            suspicion_failovers: 0,
            rotations: 0,
            errors: 0,
        };
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            match c.joblist(JobFilter::default()) {
                Ok(jobs) if jobs.len() >= JOBS => r.latencies.push(t.elapsed()),
                Ok(_) | Err(_) => r.errors += 1,
            }
        }
        let s = c.stats();
        r.suspicions = s.suspicions;
        r.suspicion_failovers = s.suspicion_failovers;
        r.rotations = s.rotations;
        Ok(r)
    })
}

/// The P10 table over what the readers saw and the writes made during `secs` s.
fn table(all: &[Reader], writes: u64, secs: u64, fill_s: f64) -> Result<Table, String> {
    let lat: Vec<Duration> = all.iter().flat_map(|r| r.latencies.clone()).collect();
    let sum = Summary::of_us(&lat).ok_or("no joblist completed")?;
    let suspicions: u64 = all.iter().map(|r| r.suspicions).sum();
    let failovers: u64 = all.iter().map(|r| r.suspicion_failovers).sum();
    let rotations: u64 = all.iter().map(|r| r.rotations).sum();
    let errors: u64 = all.iter().map(|r| r.errors).sum();
    let mut t = Table::new(
        "P10",
        format!(
            "no false suspicion: 4 contexts list {JOBS} jobs whole for {secs} s while 4 writers \
             load the primary (healthy 3-node cluster, default options)"
        ),
    );
    t.header = vec!["measure".into(), "value".into()];
    t.row(vec!["joblists completed".into(), lat.len().to_string()]);
    t.row(vec![
        format!("joblist ({JOBS} jobs) ms p50 / p99 / max"),
        format!(
            "{} / {} / {}",
            num(sum.p50 / 1e3),
            num(sum.p99 / 1e3),
            num(sum.max / 1e3)
        ),
    ]);
    t.row(vec![
        "writes during the run (load)".into(),
        writes.to_string(),
    ]);
    t.row(vec![
        "late replies probed (suspicions)".into(),
        suspicions.to_string(),
    ]);
    t.row(vec![
        "suspicion-driven failovers".into(),
        failovers.to_string(),
    ]);
    t.row(vec!["rotations".into(), rotations.to_string()]);
    t.row(vec!["failed joblists".into(), errors.to_string()]);
    t.note(format!(
        "table filled in {fill_s:.1} s by 16 contexts; the suspicion threshold is learned per op \
         (smoothed round trip + 4 deviations, never below {} ms)",
        xce::testing::SUSPICION_FLOOR.as_millis()
    ));
    t.target(
        "0 suspicion-driven failovers on a healthy primary",
        Verdict::from(
            failovers == 0 && errors == 0,
            format!("{failovers} failovers, {suspicions} probes, {errors} failed calls"),
        ),
    );
    Ok(t)
}
