//! P14: congested links. A 3-node cluster in network namespaces ([`crate::harness::netns`]) with every
//! link — clients' and peers' — limited to a low rate by a token bucket, writers submitting as
//! fast as the cluster takes them (so replication is bulk traffic on the peer links). A round
//! counts the elections during a stretch of congestion alone (there should be none), then
//! blackholes the primary and counts the elections until the cluster serves again (there
//! should be one), and how long the writers went without a success.
//!
//! Used by the `xce-congestion` command (the P14 table).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce::client::{new_job_id, parse_masters, Client, Config};
use xce::wire::JobSpec;

use crate::bench::args::Common;
use crate::bench::plan::{log_dir, Plan, ROUND_BOUND};
use crate::bench::table::{num, Table, Verdict};
use crate::bench::Summary;
use crate::harness::netns::{self, Fault, NetCluster};
use crate::harness::sides::{self, Row};

/// What P14 adds to a [`Plan`]: the links' shaping, the entries' size, the calm stretch.
#[derive(Debug, Clone)]
pub struct Links {
    /// tc's rate for every link, e.g. `1mbit`.
    pub rate: String,
    /// tc's queue bound for every link, e.g. `200ms`.
    pub latency: String,
    /// Bytes of each job's command (the size of a log entry follows it).
    pub command_bytes: usize,
    /// Congestion without a fault, before the fault.
    pub calm_for: Duration,
}

/// How a round runs: every link at 1 Mbit/s (queue 200 ms), 8 writers submitting 256-byte
/// commands back to back, 1 s to get going, 8 s of congestion alone, the primary blackholed
/// for 4 s.
pub fn plan() -> Plan<Links> {
    Plan {
        writers: 8,
        warmup: Duration::from_secs(1),
        fault_for: Duration::from_secs(4),
        ..Plan::with(Links {
            rate: "1mbit".into(),
            latency: "200ms".into(),
            command_bytes: 256,
            calm_for: Duration::from_secs(8),
        })
    }
}

/// One round's outcome.
#[derive(Debug, Clone)]
pub struct RoundResult {
    /// Elections (term increments) while the links were congested and nothing failed.
    pub calm_elections: u64,
    /// Elections from the fault until every writer was served again.
    pub fault_elections: u64,
    /// Writes acknowledged during the calm stretch.
    pub calm_writes: usize,
    /// The writers' longest time without a success, among gaps ending after the fault
    /// (median and max over writers).
    pub unavailable: Vec<Duration>,
    /// The longest gap of any writer during the calm stretch.
    pub calm_gap: Duration,
    /// Calls that failed (any error), calm stretch and after the fault.
    pub errors: usize,
}

fn spec(job_id: u64, command: &str) -> JobSpec {
    JobSpec {
        job_id,
        name: "p14".into(),
        user: "p14".into(),
        queue: String::new(),
        command: command.into(),
        ncpus: 1,
        mem_mb: 1,
    }
}

/// Successes (completion times from `origin`) and the number of failed calls of one writer.
type Calls = (Vec<Duration>, usize);

fn writer(
    ns: String,
    masters: String,
    command: String,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<Calls, String>> {
    std::thread::spawn(move || {
        netns::enter(&ns).map_err(|e| format!("enter {ns}: {e}"))?;
        let mut cfg = Config::new(parse_masters(&masters).map_err(|e| e.to_string())?);
        cfg.client_name = "p14".into();
        let client = Client::start(cfg).map_err(|e| format!("client start: {e}"))?;
        let (mut ok, mut failed) = (Vec::new(), 0);
        while !stop.load(Ordering::Relaxed) {
            match client.jobsubmit(spec(new_job_id(), &command)) {
                Ok(_) => ok.push(origin.elapsed()),
                Err(_) => {
                    failed += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Ok((ok, failed))
    })
}

/// The longest time between successes in `[from, to]` (the stretch's edges count as successes
/// only at `from`).
fn longest_gap(ok: &[Duration], from: Duration, to: Duration) -> Duration {
    let mut last = from;
    let mut best = Duration::ZERO;
    for &t in ok.iter().filter(|&&t| t > from && t <= to) {
        best = best.max(t - last);
        last = t;
    }
    best.max(to.saturating_sub(last))
}

/// Runs one round on a fresh cluster.
pub fn round(plan: &Plan<Links>) -> Result<RoundResult, String> {
    let cluster = NetCluster::start(3, &plan.controller_args, plan.log_dir.clone())
        .map_err(|e| format!("namespaces/cluster: {e}"))?;
    let p = cluster
        .wait_settled(ROUND_BOUND)
        .ok_or("no primary that every node follows")?;
    cluster
        .shape(&plan.more.rate, &plan.more.latency)
        .map_err(|e| format!("shaping: {e}"))?;
    let probe = Duration::from_secs(2);
    let masters = cluster.masters();
    let command: String = "x".repeat(plan.more.command_bytes);
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..plan.writers)
        .map(|_| {
            writer(
                cluster.client_ns.clone(),
                masters.clone(),
                command.clone(),
                origin,
                stop.clone(),
            )
        })
        .collect();
    // The warm-up to get going, then the calm stretch.
    std::thread::sleep(plan.warmup);
    let term0 = cluster
        .max_term(probe)
        .ok_or("no term before the calm stretch")?;
    let t_calm = origin.elapsed();
    std::thread::sleep(plan.more.calm_for);
    let t_fault = origin.elapsed();
    let term1 = cluster
        .max_term(probe)
        .ok_or("no term after the calm stretch")?;
    let outcome = (|| {
        cluster
            .fault(Fault::Blackhole(p), true)
            .map_err(|e| format!("fault: {e}"))?;
        std::thread::sleep(plan.fault_for);
        // The term while the old primary is still away: the others' elections.
        let during = cluster.max_term(probe);
        cluster
            .fault(Fault::Blackhole(p), false)
            .map_err(|e| format!("heal: {e}"))?;
        Ok::<_, String>(during)
    })();
    // Service after the heal, then the term the cluster settled on.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let mut per_writer = Vec::new();
    for h in handles {
        per_writer.push(h.join().map_err(|_| "writer thread panicked")??);
    }
    let during = outcome?;
    let term2 = cluster.max_term(probe).ok_or("no term after the fault")?;
    let end = origin.elapsed();
    let mut unavailable = Vec::new();
    let mut calm_gap = Duration::ZERO;
    let (mut calm_writes, mut errors) = (0, 0);
    for (ok, failed) in &per_writer {
        calm_writes += ok.iter().filter(|&&t| t > t_calm && t <= t_fault).count();
        calm_gap = calm_gap.max(longest_gap(ok, t_calm, t_fault));
        unavailable.push(longest_gap(ok, t_fault, end));
        errors += failed;
    }
    Ok(RoundResult {
        calm_elections: term1.saturating_sub(term0),
        fault_elections: term2.max(during.unwrap_or(0)).saturating_sub(term1),
        calm_writes,
        unavailable,
        calm_gap,
        errors,
    })
}

/// The P14 table: one row per controller binary measured (`label`, rounds).
pub fn table(runs: &[(String, Vec<RoundResult>)], plan: &Plan<Links>) -> Table {
    let mut t = Table::new("P14", "congested links: elections and unavailability");
    t.note(format!(
        "3 controllers in network namespaces, every link (clients' and peers') limited to {} \
         both ways (tc tbf, queue {}), {} writers submitting {}-byte commands back to back; per \
         round: {:.0} s of congestion alone, then the primary blackholed for {:.0} s; a fresh \
         cluster per round",
        plan.more.rate,
        plan.more.latency,
        plan.writers,
        plan.more.command_bytes,
        plan.more.calm_for.as_secs_f64(),
        plan.fault_for.as_secs_f64()
    ));
    t.note(
        "elections: raft term increments (every candidacy, won or not); unavailability: a \
         writer's longest time without a success from the fault until 2 s after the heal",
    );
    t.header = [
        "controller",
        "rounds",
        "elections, congestion alone (total)",
        "elections per fault: median",
        "max",
        "unavail. s: median",
        "max",
        "longest calm gap s",
        "writes/s calm",
        "failed calls",
    ]
    .map(String::from)
    .to_vec();
    let mut verdict = None;
    for (label, rs) in runs.iter().filter(|(_, rs)| !rs.is_empty()) {
        let (cells, v) = row(label, rs, plan);
        t.row(cells);
        // The verdict is the last row's (the controller under test).
        verdict = Some(v);
    }
    if let Some((ok, detail)) = verdict {
        t.target(
            "no election without a fault, ≤ 1 election per fault, unavailability ≤ 2 s",
            Verdict::from(ok, detail),
        );
    }
    t
}

/// The row of one controller binary's rounds, and its verdict: no election under congestion
/// alone, at most one per fault, unavailability at most 2 s.
fn row(label: &str, rs: &[RoundResult], plan: &Plan<Links>) -> (Vec<String>, (bool, String)) {
    let per_fault: Vec<f64> = rs.iter().map(|r| r.fault_elections as f64).collect();
    let unavail: Vec<f64> = rs
        .iter()
        .flat_map(|r| r.unavailable.iter().map(|d| d.as_secs_f64()))
        .collect();
    let calm: u64 = rs.iter().map(|r| r.calm_elections).sum();
    let pf = Summary::of(&per_fault);
    let un = Summary::of(&unavail);
    let calm_gap = rs
        .iter()
        .map(|r| r.calm_gap.as_secs_f64())
        .fold(0.0, f64::max);
    let rate = rs.iter().map(|r| r.calm_writes).sum::<usize>() as f64
        / (rs.len() as f64 * plan.more.calm_for.as_secs_f64());
    let cells = vec![
        label.to_string(),
        rs.len().to_string(),
        calm.to_string(),
        pf.map_or("-".into(), |s| num(s.p50)),
        pf.map_or("-".into(), |s| num(s.max)),
        un.map_or("-".into(), |s| num(s.p50)),
        un.map_or("-".into(), |s| num(s.max)),
        num(calm_gap),
        num(rate),
        rs.iter().map(|r| r.errors).sum::<usize>().to_string(),
    ];
    let max_pf = pf.map_or(f64::INFINITY, |s| s.max);
    let max_un = un.map_or(f64::INFINITY, |s| s.max);
    let verdict = (
        calm == 0 && max_pf <= 1.0 && max_un <= 2.0,
        format!(
            "{label}: {calm} elections under congestion alone, at most {} per fault, \
             unavailability at most {} s",
            num(max_pf),
            num(max_un)
        ),
    );
    (cells, verdict)
}

/// The command's name (its binary).
pub const TOOL: &str = "xce-congestion";

/// `xce-congestion`: rounds of this build (and of `--before`'s binary, round for round) with
/// every link at `rate` and `writers` writers (each `None`: [`plan`]'s); the P14 table.
pub fn command(args: &Common, rate: Option<String>, writers: Option<usize>) -> ExitCode {
    let logs = log_dir(TOOL);
    let defaults = plan();
    let plan = Plan {
        writers: writers.unwrap_or(defaults.writers),
        log_dir: Some(logs.clone()),
        controller_args: args.controller_args.clone(),
        more: Links {
            rate: rate.unwrap_or_else(|| defaults.more.rate.clone()),
            ..defaults.more.clone()
        },
        ..defaults
    };
    let mut rows = Vec::new();
    if let Some(b) = &args.before {
        rows.push(Row {
            label: "before".into(),
            bin: b.clone(),
            with: (),
        });
    }
    rows.push(Row {
        label: "this build".into(),
        bin: crate::controller_bin(),
        with: (),
    });
    sides::banner(TOOL, args.rounds, &rows, &logs);
    let started = Instant::now();
    let runs = match sides::alternate(TOOL, &rows, args.rounds, &logs, |row, n| {
        let r = round(&plan)?;
        eprintln!(
            "  {} round {n}: {} elections calm, {} for the fault, unavailable max {:.2} s, {} failed calls",
            row.label,
            r.calm_elections,
            r.fault_elections,
            r.unavailable.iter().max().unwrap_or(&Duration::ZERO).as_secs_f64(),
            r.errors
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
