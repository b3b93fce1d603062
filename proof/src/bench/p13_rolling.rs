//! S14 / C14 / P13: a rolling restart under load. Writing (`jobsubmit`) and listing
//! (`joblist`) contexts run while every controller is restarted in turn, primary last (so it
//! hands over to a standby restarted before it); a round reports each call's latency, split
//! into calls invoked during a restart and outside them, the errors callers saw, and whether
//! every acknowledged job is listed exactly once afterwards.
//!
//! Used by the test `proof/tests/rolling_restart.rs` (S14: no error, nothing lost or twice)
//! and the `xce-rolling` command (the P13 table, side by side with another controller build
//! or with crash restarts).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xce::client::new_job_id;
use xce_proto::wire::JobFilter;

use crate::bench::args::Common;
use crate::bench::plan::{log_dir, Plan};
use crate::bench::steady::named_client;
use crate::bench::table::{num, Table, Verdict};
use crate::bench::Summary;
use crate::harness::sides::{self, Row};
use crate::{Cluster, ClusterOpts};

/// How each controller is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// SIGTERM, wait for the exit (a planned restart: the primary hands over, C14).
    Terminate,
    /// `kill -9` (a crash), then start again: what a planned restart cost before C14.
    Kill,
}

impl Restart {
    pub fn label(self) -> &'static str {
        match self {
            Restart::Terminate => "SIGTERM",
            Restart::Kill => "kill -9",
        }
    }
}

/// What P13 adds to a [`Plan`]: how the nodes are restarted, and the listings' size.
#[derive(Debug, Clone)]
pub struct Restarts {
    pub restart: Restart,
    /// After a node is started again, before the next restart (the restart's window ends).
    pub settle: Duration,
    /// A reader's page: the listing path on every call, at a cost that does not grow with
    /// the jobs written during the run.
    pub list_limit: u32,
}

/// How a round runs: 64 writing and 8 listing contexts, 10 ms between calls, 2 s of load
/// before the first restart, SIGTERM, 1.5 s after each node is back, pages of 500 jobs.
pub fn plan() -> Plan<Restarts> {
    Plan {
        writers: 64,
        readers: 8,
        pace: Duration::from_millis(10),
        warmup: Duration::from_secs(2),
        ..Plan::with(Restarts {
            restart: Restart::Terminate,
            settle: Duration::from_millis(1500),
            list_limit: 500,
        })
    }
}

/// One round's outcome.
#[derive(Debug, Clone, Default)]
pub struct RoundResult {
    /// Latencies of the calls invoked outside the restarts' windows.
    pub outside: Vec<Duration>,
    /// Latencies of the calls invoked while a node was being restarted (from its signal
    /// until `settle` after it was started again).
    pub during: Vec<Duration>,
    /// Calls that returned an error, and the first few errors.
    pub errors: usize,
    pub error_samples: Vec<String>,
    /// Writes acknowledged; of them, not listed afterwards, and listed more than once.
    pub acked: usize,
    pub missing: usize,
    pub duplicated: usize,
    /// Primaries whose log says they handed leadership over (C14).
    pub handed_over: usize,
    /// Nodes that did not exit within 10 s of SIGTERM (killed then).
    pub stuck: Vec<u32>,
}

struct Call {
    invoked: Duration,
    took: Duration,
}

/// Bound on waiting for a primary.
const PRIMARY_WAIT: Duration = Duration::from_secs(15);

/// Runs one round on a fresh 3-node cluster of `$XCE_CONTROLLER` (see
/// [`crate::controller_bin`]).
pub fn round(plan: &Plan<Restarts>) -> Result<RoundResult, String> {
    let own_logs = plan.log_dir.is_none();
    let log_dir = plan.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "xce-rolling-{}-{}",
            std::process::id(),
            new_job_id()
        ))
    });
    let mut c = Cluster::start(
        3,
        ClusterOpts {
            log_dir: Some(log_dir.clone()),
            ..plan.cluster_opts()
        },
    )
    .map_err(|e| format!("start cluster: {e}"))?;
    let res = run(&mut c, plan, &log_dir);
    c.stop_all(Duration::from_secs(5));
    if own_logs && res.is_ok() {
        let _ = std::fs::remove_dir_all(&log_dir);
    }
    res
}

/// The round on a started cluster: load, every node restarted in turn (primary last), then
/// the calls split into during and outside the restarts, and the acknowledged jobs listed.
fn run(
    c: &mut Cluster,
    plan: &Plan<Restarts>,
    log_dir: &std::path::Path,
) -> Result<RoundResult, String> {
    let p0 = c.wait_primary(PRIMARY_WAIT).ok_or("no primary elected")?;
    let masters = c.masters();
    let mut load = Load::start(&masters, plan);
    std::thread::sleep(plan.warmup);
    let mut out = RoundResult::default();
    let restarts = restart_each(c, p0, plan, log_dir, load.origin, &mut out);
    std::thread::sleep(Duration::from_secs(1));
    let calls = load.stop_threads()?;
    let windows = restarts?;
    for call in calls {
        let during = windows
            .iter()
            .any(|&(a, b)| call.invoked >= a && call.invoked < b);
        if during {
            out.during.push(call.took);
        } else {
            out.outside.push(call.took);
        }
    }
    let (n, samples) = std::mem::take(&mut *load.errors.lock().unwrap());
    out.errors = n;
    out.error_samples = samples;
    let acked = load.acked.lock().unwrap().clone();
    count_listed(&masters, &acked, &mut out)?;
    Ok(out)
}

/// The writers and listers of a round, each a thread with a context of its own.
struct Load {
    origin: Instant,
    stop: Arc<AtomicBool>,
    /// The ids of the acknowledged writes.
    acked: Arc<Mutex<Vec<u64>>>,
    /// Calls that failed, and the first few errors.
    errors: Arc<Mutex<(usize, Vec<String>)>>,
    threads: Vec<std::thread::JoinHandle<Result<Vec<Call>, String>>>,
}

impl Load {
    fn start(masters: &str, plan: &Plan<Restarts>) -> Load {
        let mut load = Load {
            origin: Instant::now(),
            stop: Arc::new(AtomicBool::new(false)),
            acked: Arc::new(Mutex::new(Vec::new())),
            errors: Arc::new(Mutex::new((0usize, Vec::<String>::new()))),
            threads: Vec::new(),
        };
        for w in 0..plan.writers + plan.readers {
            let writer = w < plan.writers;
            let thread = load.client_thread(masters, writer, plan.pace, plan.more.list_limit);
            load.threads.push(thread);
        }
        load
    }

    /// A writer (`jobsubmit`, acknowledged ids kept) or a lister (`joblist` of `limit` jobs),
    /// calling every `pause` until the load stops.
    fn client_thread(
        &self,
        masters: &str,
        writer: bool,
        pause: Duration,
        limit: u32,
    ) -> std::thread::JoinHandle<Result<Vec<Call>, String>> {
        let (stop, masters, acked, errors, origin) = (
            self.stop.clone(),
            masters.to_string(),
            self.acked.clone(),
            self.errors.clone(),
            self.origin,
        );
        std::thread::spawn(move || -> Result<Vec<Call>, String> {
            let cl = named_client(&masters, "rolling")?;
            let mut calls = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let invoked = origin.elapsed();
                let res = if writer {
                    let s = crate::bench::load::typical_job(new_job_id());
                    let r = cl.jobsubmit(s.clone());
                    if r.is_ok() {
                        acked.lock().unwrap().push(s.job_id);
                    }
                    r.map(|_| ())
                } else {
                    cl.joblist(JobFilter {
                        limit,
                        ..JobFilter::default()
                    })
                    .map(|_| ())
                };
                let took = origin.elapsed() - invoked;
                if let Err(e) = res {
                    let mut g = errors.lock().unwrap();
                    g.0 += 1;
                    if g.1.len() < 5 {
                        g.1.push(format!(
                            "{} at {:?}: {e}; {:?}",
                            if writer { "jobsubmit" } else { "joblist" },
                            invoked,
                            cl.last_error()
                        ));
                    }
                }
                calls.push(Call { invoked, took });
                std::thread::sleep(pause);
            }
            Ok(calls)
        })
    }

    /// Stops every thread: all their calls.
    fn stop_threads(&mut self) -> Result<Vec<Call>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        for t in std::mem::take(&mut self.threads) {
            calls.extend(t.join().map_err(|_| "a client thread panicked")??);
        }
        Ok(calls)
    }
}

/// Restarts every node in turn, the primary `p0` last (so that it hands over to a standby
/// restarted before it), as `plan` says; notes in `out` the nodes stuck on SIGTERM and the
/// handovers their logs tell of. The windows of the restarts (from `origin`): from a node's
/// signal until `settle` after it was started again.
fn restart_each(
    c: &mut Cluster,
    p0: u32,
    plan: &Plan<Restarts>,
    log_dir: &std::path::Path,
    origin: Instant,
    out: &mut RoundResult,
) -> Result<Vec<(Duration, Duration)>, String> {
    let mut windows = Vec::new();
    let order: Vec<u32> = (1..=3).filter(|&i| i != p0).chain([p0]).collect();
    for id in order {
        let start = origin.elapsed();
        // A node's log file goes on across restarts and rounds: only what this stop wrote.
        let log_path = log_dir.join(format!("node-{id}.log"));
        let log_from = std::fs::metadata(&log_path).map_or(0, |m| m.len() as usize);
        match plan.more.restart {
            Restart::Terminate => {
                if !c.terminate(id, Duration::from_secs(10)) {
                    out.stuck.push(id);
                }
            }
            Restart::Kill => c.kill(id),
        }
        c.restart(id)
            .map_err(|e| format!("start node {id} again: {e}"))?;
        std::thread::sleep(plan.more.settle);
        windows.push((start, origin.elapsed()));
        // Read from the node's own log, not from who answered `hello` as primary just before
        // the stop: on a loaded machine that probe can time out (a handover then went uncounted).
        let log = std::fs::read(&log_path).unwrap_or_default();
        let log = String::from_utf8_lossy(log.get(log_from..).unwrap_or_default());
        if log.lines().any(|l| l.contains("handed leadership over")) {
            out.handed_over += 1;
        }
    }
    Ok(windows)
}

/// Every acknowledged job listed exactly once (paged: thousands were written).
fn count_listed(masters: &str, acked: &[u64], out: &mut RoundResult) -> Result<(), String> {
    let listed = named_client(masters, "rolling")?
        .joblist_all(JobFilter::default())
        .map_err(|e| format!("joblist_all: {e}"))?;
    let mut count: HashMap<u64, usize> = HashMap::new();
    for j in listed {
        *count.entry(j.job_id).or_default() += 1;
    }
    out.acked = acked.len();
    out.missing = acked.iter().filter(|id| !count.contains_key(id)).count();
    out.duplicated = acked
        .iter()
        .filter(|id| count.get(id).is_some_and(|&n| n > 1))
        .count();
    Ok(())
}

/// Latencies in milliseconds.
fn ms(v: &[Duration]) -> Option<Summary> {
    Summary::of(&v.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>())
}

/// The 99.9th percentile in milliseconds: the calls that waited out a failover are a few per
/// context per restart, below the p99 of all calls during the restarts.
fn p999(v: &[Duration]) -> Option<f64> {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(f64::total_cmp);
    Some(crate::bench::stats::percentile(&ms, 99.9))
}

/// The P13 table: one row per (controller, restart kind) measured.
pub fn table(runs: &[(String, Vec<RoundResult>)], plan: &Plan<Restarts>) -> Table {
    let mut t = Table::new("P13", "rolling restart under load: errors and latency");
    t.note(format!(
        "3 controllers and the clients on this machine; {} writing and {} listing contexts \
         ({} ms between calls, lists of {} jobs); every node restarted in turn, primary last; \
         a call is 'during' when invoked between a node's signal and {:.1} s after it was \
         started again; a fresh cluster per round",
        plan.writers,
        plan.readers,
        plan.pace.as_millis(),
        plan.more.list_limit,
        plan.more.settle.as_secs_f64()
    ));
    t.columns(&[
        "controller, restart",
        "rounds",
        "calls",
        "errors",
        "lost / twice",
        "p99 outside ms",
        "p99 during ms",
        "during − outside",
        "p99.9 during ms",
        "max during ms",
        "handed over",
    ]);
    let mut verdict = None;
    for (label, rs) in runs {
        if rs.is_empty() {
            continue;
        }
        let outside: Vec<Duration> = rs.iter().flat_map(|r| r.outside.clone()).collect();
        let during: Vec<Duration> = rs.iter().flat_map(|r| r.during.clone()).collect();
        let errors: usize = rs.iter().map(|r| r.errors).sum();
        let lost: usize = rs.iter().map(|r| r.missing).sum();
        let twice: usize = rs.iter().map(|r| r.duplicated).sum();
        let (so, sd) = (ms(&outside), ms(&during));
        let (po, pd) = (so.map(|s| s.p99), sd.map(|s| s.p99));
        let diff = po.zip(pd).map(|(o, d)| d - o);
        t.row(vec![
            label.clone(),
            rs.len().to_string(),
            (outside.len() + during.len()).to_string(),
            errors.to_string(),
            format!("{lost} / {twice}"),
            po.map_or("-".into(), num),
            pd.map_or("-".into(), num),
            diff.map_or("-".into(), |d| {
                format!("{}{}", if d >= 0.0 { "+" } else { "" }, num(d))
            }),
            p999(&during).map_or("-".into(), num),
            sd.map_or("-".into(), |s| num(s.max)),
            format!(
                "{}/{}",
                rs.iter().map(|r| r.handed_over).sum::<usize>(),
                rs.len()
            ),
        ]);
        // The verdict is the last row's (this build, planned restarts).
        let d = diff.unwrap_or(f64::INFINITY);
        verdict = Some((
            errors == 0 && lost == 0 && twice == 0 && d <= 50.0,
            format!(
                "{label}: {errors} errors, {lost} lost, {twice} twice, p99 during − outside {} ms",
                num(d)
            ),
        ));
    }
    if let Some((ok, detail)) = verdict {
        t.target(
            "0 errors, nothing lost or twice, p99 during within 50 ms of p99 outside",
            Verdict::from(ok, detail),
        );
    }
    t
}

/// The command's name (its binary).
pub const TOOL: &str = "xce-rolling";

/// `xce-rolling`: rounds of this build restarted by SIGTERM, beside `--before`'s binary and (with
/// `crash`) this build restarted by kill -9, round for round; the P13 table.
pub fn command(args: &Common, crash: bool) -> ExitCode {
    let logs = log_dir(TOOL);
    let plan = Plan {
        log_dir: Some(logs.clone()),
        controller_args: args.controller_args.clone(),
        ..plan()
    };
    let current = crate::controller_bin();
    // The row under test last: the table's verdict is its.
    let mut rows = Vec::new();
    if let Some(b) = &args.before {
        rows.push(Row {
            label: "before, SIGTERM".into(),
            bin: b.clone(),
            with: Restart::Terminate,
        });
    }
    if crash {
        rows.push(Row {
            label: "this build, kill -9".into(),
            bin: current.clone(),
            with: Restart::Kill,
        });
    }
    rows.push(Row {
        label: "this build, SIGTERM".into(),
        bin: current,
        with: Restart::Terminate,
    });
    sides::banner(TOOL, args.rounds, &rows, &logs);
    let started = Instant::now();
    let runs = match sides::alternate(TOOL, &rows, args.rounds, &logs, |row, n| {
        let r = round(&Plan {
            more: Restarts {
                restart: row.with,
                ..plan.more.clone()
            },
            ..plan.clone()
        })?;
        eprintln!(
            "  {} round {n}: {} calls, {} errors {:?}, {} acknowledged ({} lost, {} twice), handed over {}",
            row.label,
            r.outside.len() + r.during.len(),
            r.errors,
            r.error_samples.first(),
            r.acked,
            r.missing,
            r.duplicated,
            r.handed_over
        );
        Ok(r)
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
    println!("{}", table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
