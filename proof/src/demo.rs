//! The failover demo (the README's main command): a local 3-controller cluster, clients
//! working through the library, a `kill -9` of the primary, and a readable timeline of what
//! happened — the kill, the election, the calls that waited, the "cluster not ready" answers of
//! a short-budget client, the transparent recovery of a default-budget client — then a check
//! that exactly one job exists per submitted id, and a clean stop.
//!
//! Run by `xce-demo [--kills N]` (default 1), which `scripts/demo.sh` builds and starts.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xce::client::Event;
use xce::client::RetryConfig;
use xce::client::{new_job_id, Client};
use xce::Error;
use xce_proto::wire::{JobFilter, JobSpec};

use crate::bench::steady::named_client;
use crate::{Cluster, ClusterOpts};

/// One line of the timeline, at `at` after the demo's start.
struct Line {
    at: Duration,
    who: &'static str,
    text: String,
}

#[derive(Clone)]
struct Timeline {
    t0: Instant,
    lines: Arc<Mutex<Vec<Line>>>,
}

impl Timeline {
    fn at(&self, at: Instant, who: &'static str, text: impl Into<String>) {
        let line = Line {
            at: at.saturating_duration_since(self.t0),
            who,
            text: text.into(),
        };
        self.lines.lock().unwrap().push(line);
    }
    fn now(&self, who: &'static str, text: impl Into<String>) {
        self.at(Instant::now(), who, text)
    }
}

/// What one call did.
struct CallRecord {
    start: Instant,
    end: Instant,
    result: Result<(), Error>,
}

/// The demo with `kills` kills of the primary; `Err` when a write was lost, duplicated or
/// failed.
pub fn run(kills: usize) -> Result<(), String> {
    let log_dir = crate::bench::plan::log_dir("xce-demo");
    println!("== libxce failover demo: 3 controllers on loopback, clients through libxce ==\n");
    let tl = Timeline {
        t0: Instant::now(),
        lines: Arc::default(),
    };
    let (mut cluster, primary) = start_cluster(&log_dir, &tl)?;
    let masters = cluster.masters();
    let (patient, hasty) = clients(&masters, &tl)?;
    let load = Load::start(patient, hasty);
    let kills = kill_primaries(&mut cluster, primary, kills, &tl)?;
    std::thread::sleep(Duration::from_millis(1000));
    let ran = load.stop()?;
    narrate_calls(&tl, &kills, &ran);
    print_timeline(&tl);
    let jobs = count_jobs(&masters, &ran.submitted)?;
    print_summary(&ran, &jobs, &kills);
    cluster.stop_all(Duration::from_secs(5));
    println!("cluster stopped (SIGTERM to every node)");
    let _ = std::fs::remove_dir_all(&log_dir);
    let failed_writes = ran.writes.iter().filter(|c| c.result.is_err()).count();
    if jobs.lost > 0 || jobs.dups > 0 || failed_writes > 0 {
        return Err(format!(
            "{} lost, {} duplicated, {failed_writes} failed writes",
            jobs.lost, jobs.dups
        ));
    }
    Ok(())
}

/// Three controllers on loopback, each node printed, and the first primary (on the timeline).
fn start_cluster(log_dir: &Path, tl: &Timeline) -> Result<(Cluster, u32), String> {
    let cluster = Cluster::start(
        3,
        ClusterOpts {
            extra_args: vec![],
            log_dir: Some(log_dir.to_path_buf()),
            ..Default::default()
        },
    )
    .map_err(|e| format!("starting controllers: {e}"))?;
    for n in &cluster.nodes {
        println!(
            "node {} client={} pid={}",
            n.id,
            n.client,
            n.pid().unwrap_or(0)
        );
    }
    let primary = cluster
        .wait_primary(Duration::from_secs(20))
        .ok_or("no primary elected within 20 s")?;
    tl.now("cluster", format!("node {primary} elected primary"));
    println!("controller logs: {}\n", log_dir.display());
    Ok((cluster, primary))
}

/// The two clients of the demo, each connected to the primary and narrating its failovers:
/// `patient`, with the default budget (20 sleeps, 50 ms doubling to 5 s: rides out an
/// election), and `hasty`, with a budget far shorter than an election (says "cluster not
/// ready" instead of waiting).
fn clients(masters: &str, tl: &Timeline) -> Result<(Client, Client), String> {
    let patient = named_client(masters, "patient")?;
    let hasty = named_client(masters, "hasty")?;
    hasty
        .set_retry_config(Some(RetryConfig {
            max_retries: 2,
            initial_retry_ms: 20,
            max_retry_ms: 40,
            backoff_multiplier: 2.0,
        }))
        .map_err(|e| e.to_string())?;
    for (who, cl) in [("patient", &patient), ("hasty", &hasty)] {
        // Find the primary first (a client may have started on a standby): the timeline is
        // about the kill, not about the first redirect.
        cl.hello().map_err(|e| format!("{who}: hello: {e}"))?;
        narrate_events(cl, who, tl);
    }
    Ok((patient, hasty))
}

/// Puts `cl`'s failover events on the timeline as `who`.
fn narrate_events(cl: &Client, who: &'static str, tl: &Timeline) {
    let tl = tl.clone();
    // Every give-up is counted in the summary; the timeline shows the first in a row.
    let gave_up = AtomicBool::new(false);
    cl.set_event_handler(Some(Arc::new(move |e: &Event| match e {
        Event::FailoverStarted { from, cause } => tl.now(
            who,
            format!("failover started: {from} failed ({})", outcome_text(cause)),
        ),
        Event::Rotation { to, .. } => tl.now(who, format!("  tries {to}")),
        Event::FailoverFinished { to, duration } => {
            gave_up.store(false, Ordering::Relaxed);
            tl.now(
                who,
                format!(
                    "failover finished: {to} serves, {} ms after the first failure",
                    duration.as_millis()
                ),
            )
        }
        Event::NotReady {
            error,
            attempts,
            elapsed,
        } => {
            if !gave_up.swap(true, Ordering::Relaxed) {
                tl.now(
                    who,
                    format!(
                        "call gave up: \"{error}\" after {attempts} attempts in {} ms (its budget is short)",
                        elapsed.as_millis()
                    ),
                )
            }
        }
    })));
}

/// The work the two clients do while the primaries are killed: `patient` submits, `hasty`
/// lists, each on a thread of its own.
struct Load {
    patient: Arc<Client>,
    stop: Arc<AtomicBool>,
    submitted: Arc<Mutex<Vec<u64>>>,
    writer: std::thread::JoinHandle<Vec<CallRecord>>,
    reader: std::thread::JoinHandle<Vec<CallRecord>>,
}

impl Load {
    fn start(patient: Client, hasty: Client) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let patient = Arc::new(patient);
        let submitted = Arc::new(Mutex::new(Vec::<u64>::new()));
        let writer = {
            let (cl, stop, submitted) = (patient.clone(), stop.clone(), submitted.clone());
            std::thread::spawn(move || workload(&cl, &stop, Some(&submitted)))
        };
        let reader = {
            let stop = stop.clone();
            std::thread::spawn(move || workload(&hasty, &stop, None))
        };
        Load {
            patient,
            stop,
            submitted,
            writer,
            reader,
        }
    }

    /// Stops both threads: what they did, with the patient client (for its statistics).
    fn stop(self) -> Result<Ran, String> {
        self.stop.store(true, Ordering::Relaxed);
        let writes = self.writer.join().map_err(|_| "writer thread panicked")?;
        let reads = self.reader.join().map_err(|_| "reader thread panicked")?;
        let submitted = self.submitted.lock().unwrap().clone();
        Ok(Ran {
            patient: self.patient,
            submitted,
            writes,
            reads,
        })
    }
}

/// What the load did.
struct Ran {
    patient: Arc<Client>,
    /// The ids of the acknowledged submits.
    submitted: Vec<u64>,
    writes: Vec<CallRecord>,
    reads: Vec<CallRecord>,
}

/// One kill of the primary: when, and when the next one was elected.
struct Kill {
    killed: Instant,
    elected: Instant,
}

impl Kill {
    /// The patient client's first success after this kill.
    fn first_success<'a>(&self, writes: &'a [CallRecord]) -> Option<&'a CallRecord> {
        writes
            .iter()
            .find(|c| c.end > self.killed && c.result.is_ok())
    }
}

/// `kills` times, 1.5 s apart: kill -9 the primary, wait for the next, restart the killed node
/// a second later (it rejoins as a standby); each step on the timeline.
fn kill_primaries(
    cluster: &mut Cluster,
    mut primary: u32,
    kills: usize,
    tl: &Timeline,
) -> Result<Vec<Kill>, String> {
    let mut out = Vec::new();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(1500));
        let pid = cluster.node(primary).pid().unwrap_or(0);
        let killed = Instant::now();
        cluster.kill(primary);
        tl.at(
            killed,
            "cluster",
            format!("kill -9 node {primary} (the primary, pid {pid})"),
        );
        let next = cluster
            .wait_new_primary(primary, Duration::from_secs(20))
            .ok_or("no new primary within 20 s")?;
        let elected = Instant::now();
        tl.at(
            elected,
            "cluster",
            format!(
                "node {next} is the new primary ({} ms after the kill)",
                (elected - killed).as_millis()
            ),
        );
        out.push(Kill { killed, elected });
        std::thread::sleep(Duration::from_millis(1000));
        cluster
            .restart(primary)
            .map_err(|e| format!("restarting node {primary}: {e}"))?;
        tl.now(
            "cluster",
            format!("node {primary} restarted from its data directory (rejoins as a standby)"),
        );
        primary = next;
    }
    Ok(out)
}

/// Puts the calls around each kill on the timeline: the writes that waited through the
/// failover, the first and last "cluster not ready" of the hasty reader, the first success.
fn narrate_calls(tl: &Timeline, kills: &[Kill], ran: &Ran) {
    for (k, kill) in kills.iter().enumerate() {
        let waited = ran
            .writes
            .iter()
            .filter(|c| c.end > kill.killed && c.start < kill.elected);
        for c in waited {
            tl.at(
                c.end,
                "patient",
                format!(
                    "a call that waited through the failover: submitted at +{} ms, {} after {} ms",
                    c.start.saturating_duration_since(tl.t0).as_millis(),
                    result_text(&c.result),
                    (c.end - c.start).as_millis()
                ),
            );
        }
        let not_ready: Vec<&CallRecord> = ran
            .reads
            .iter()
            .filter(|c| c.end > kill.killed && c.result == Err(Error::NotReady))
            .collect();
        if let (Some(first), Some(last)) = (not_ready.first(), not_ready.last()) {
            tl.at(
                first.end,
                "hasty",
                format!(
                    "joblist: cluster not ready (first of {} such answers)",
                    not_ready.len()
                ),
            );
            tl.at(last.end, "hasty", "joblist: cluster not ready (last)");
        }
        if let Some(ok) = kill.first_success(&ran.writes) {
            tl.at(
                ok.end,
                "patient",
                format!(
                    "RECOVERED (kill {}): first success {} ms after the kill",
                    k + 1,
                    (ok.end - kill.killed).as_millis()
                ),
            );
        }
    }
}

/// The demo's jobs as the cluster lists them, against the ids acknowledged.
struct Jobs {
    acknowledged: usize,
    stored: usize,
    lost: usize,
    dups: usize,
}

/// Exactly one job per submitted id: lists the demo's jobs through a fresh context.
fn count_jobs(masters: &str, submitted: &[u64]) -> Result<Jobs, String> {
    let checker = named_client(masters, "checker")?;
    let stored = checker
        .joblist(JobFilter {
            user: "demo".into(),
            ..Default::default()
        })
        .map_err(|e| format!("final joblist: {e}"))?;
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for j in &stored {
        *counts.entry(j.job_id).or_default() += 1;
    }
    Ok(Jobs {
        acknowledged: submitted.len(),
        stored: stored.len(),
        lost: submitted
            .iter()
            .filter(|id| !counts.contains_key(id))
            .count(),
        dups: counts.values().filter(|&&n| n > 1).count(),
    })
}

fn print_summary(ran: &Ran, jobs: &Jobs, kills: &[Kill]) {
    let (writes, reads) = (&ran.writes, &ran.reads);
    let failed_writes = writes.iter().filter(|c| c.result.is_err()).count();
    let ok_reads = reads.iter().filter(|c| c.result.is_ok()).count();
    let not_ready = reads
        .iter()
        .filter(|c| c.result == Err(Error::NotReady))
        .count();
    let other = reads.len() - ok_reads - not_ready;
    println!("\n== Summary ==");
    println!(
        "patient client (default budget): {} submits, {} failed",
        writes.len(),
        failed_writes
    );
    println!("hasty client (short budget):     {} joblists: {ok_reads} ok, {not_ready} \"cluster not ready\", {other} other errors", reads.len());
    println!(
        "jobs: {} acknowledged, {} stored, {} lost, {} duplicated",
        jobs.acknowledged, jobs.stored, jobs.lost, jobs.dups
    );
    let s = ran.patient.stats();
    println!(
        "patient stats: {} requests, {} retries, {} rotations, {} failovers, last failover {} ms, {} ms in backoff",
        s.requests, s.retries, s.rotations, s.failovers, s.last_failover_ms, s.backoff_ms
    );
    for (k, kill) in kills.iter().enumerate() {
        if let Some(ok) = kill.first_success(writes) {
            println!(
                "kill {}: election {} ms, first success {} ms after the kill ({} ms after the election)",
                k + 1,
                (kill.elected - kill.killed).as_millis(),
                (ok.end - kill.killed).as_millis(),
                ok.end.saturating_duration_since(kill.elected).as_millis()
            );
        }
    }
}

/// Submits (with `ids`) or lists every 40 ms until `stop`, recording every call.
fn workload(cl: &Client, stop: &AtomicBool, ids: Option<&Mutex<Vec<u64>>>) -> Vec<CallRecord> {
    let mut out = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let result = match ids {
            Some(ids) => {
                n += 1;
                let spec = JobSpec {
                    job_id: new_job_id(),
                    name: format!("demo-{n}"),
                    user: "demo".into(),
                    command: "sleep 10".into(),
                    ncpus: 1,
                    mem_mb: 128,
                    ..Default::default()
                };
                cl.jobsubmit(spec).map(|id| ids.lock().unwrap().push(id))
            }
            None => cl
                .joblist(JobFilter {
                    limit: 10,
                    ..Default::default()
                })
                .map(drop),
        };
        out.push(CallRecord {
            start,
            end: Instant::now(),
            result,
        });
        std::thread::sleep(Duration::from_millis(40));
    }
    out
}

fn print_timeline(tl: &Timeline) {
    let mut lines = std::mem::take(&mut *tl.lines.lock().unwrap());
    lines.sort_by_key(|l| l.at);
    println!("== Timeline (ms since the demo started) ==");
    let mut last_rotations: Option<(&'static str, usize)> = None;
    for l in &lines {
        // Collapse runs of "tries" lines: they are many during an election.
        if l.text.starts_with("  tries") {
            match &mut last_rotations {
                Some((who, n)) if *who == l.who => *n += 1,
                _ => last_rotations = Some((l.who, 1)),
            }
            continue;
        }
        if let Some((who, n)) = last_rotations.take() {
            let s = if n == 1 { "" } else { "s" };
            println!("{:>8} {:<8} ({n} rotation{s} between masters)", "", who);
        }
        println!(
            "{:>8} {:<8} {}",
            format!("+{}", l.at.as_millis()),
            l.who,
            l.text
        );
    }
}

fn outcome_text(o: &xce::client::AttemptOutcome) -> String {
    match o {
        xce::client::AttemptOutcome::Status(s) => xce::strerror(*s).to_string(),
        xce::client::AttemptOutcome::Transport(e) => e.to_string(),
    }
}

fn result_text(r: &Result<(), Error>) -> String {
    match r {
        Ok(()) => "succeeded".into(),
        Err(e) => format!("failed: {e}"),
    }
}
