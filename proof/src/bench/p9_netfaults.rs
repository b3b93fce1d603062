//! Network-fault rounds (S11, P9): a 3-node cluster in network namespaces ([`crate::harness::netns`]),
//! concurrent writers (`jobsubmit` of fresh ids) and readers (`joblist`) through the library's
//! [`Client`] in the client namespace, one fault per round; the history is checked for
//! linearizability ([`crate::check::linearizable`]) and every acknowledged write must be listed
//! exactly once at the end. Each round measures how long the clients went without service.
//!
//! Used by `tests/netfaults.rs` (pass/fail) and the `xce-netfaults` command (the P9 table).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce::client::new_job_id;
use xce::Error;
use xce_proto::wire::{JobFilter, JobSpec};

use crate::bench::plan::{log_dir, Plan, ROUND_BOUND};
use crate::bench::steady::named_client;
use crate::bench::table::{num, Table, Verdict};
use crate::bench::Summary;
use crate::check::linearizable::{self, History, Read, Violation, Write};
use crate::harness::netns::{self, Fault, NetCluster};

/// What goes wrong in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The primary's links go down: its packets vanish both ways, no RST.
    BlackholedPrimary,
    /// The primary loses its peers; clients still reach it.
    IsolatedPrimary,
    /// The standby after the primary in the master list drops clients' packets; 1 s later the
    /// primary is blackholed (the loop may try the silent standby first).
    SilentStandbyThenBlackhole,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::BlackholedPrimary,
        Scenario::IsolatedPrimary,
        Scenario::SilentStandbyThenBlackhole,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::BlackholedPrimary => "primary blackholed",
            Scenario::IsolatedPrimary => "primary cut off from its peers",
            Scenario::SilentStandbyThenBlackhole => {
                "standby silent to clients, then primary blackholed"
            }
        }
    }
}

/// How a round runs: 3 writers and 3 readers, 20 ms between calls, 1 s of service before a
/// fault that lasts 5 s.
pub fn plan() -> Plan {
    Plan {
        writers: 3,
        readers: 3,
        pace: Duration::from_millis(20),
        warmup: Duration::from_secs(1),
        fault_for: Duration::from_secs(5),
        ..Plan::with(())
    }
}

/// P9 (raised, C15): per-thread unavailability, median and max (s).
pub const P9_P50_S: f64 = 0.4;
pub const P9_MAX_S: f64 = 0.6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Writer,
    Reader,
}

/// One call of one thread; times from the round's origin.
#[derive(Debug, Clone)]
struct Call {
    invoked: Duration,
    completed: Duration,
    /// Writes: the id; reads: unused.
    id: u64,
    result: Result<Vec<u64>, Error>,
}

/// What one client thread saw in a round.
#[derive(Debug, Clone)]
pub struct ThreadResult {
    pub kind: Kind,
    /// Longest time between two successive successes, among gaps that end after the fault.
    pub unavailable: Duration,
    /// Fault → the success that ended that gap.
    pub served_again: Duration,
    /// Calls that returned `E_XCE_NOT_READY` to the caller after the fault.
    pub not_ready: usize,
    /// Calls that returned any other error after the fault.
    pub other_errors: Vec<Error>,
    /// It succeeded after the fault was healed.
    pub recovered: bool,
}

/// One round's outcome.
#[derive(Debug, Clone)]
pub struct RoundResult {
    pub scenario: Scenario,
    pub old_primary: u32,
    /// The node that answered `hello` as primary after the fault, and when (from the fault).
    pub new_primary: Option<(u32, Duration)>,
    /// The silent standby became primary: clients cannot reach it until the heal (such a round
    /// measures something else; the runner repeats it).
    pub silent_elected: bool,
    pub threads: Vec<ThreadResult>,
    pub writes_acked: usize,
    pub writes_failed: usize,
    pub reads: usize,
    /// Linearizability of the whole history, including the final listing.
    pub history: Result<(), Vec<Violation>>,
}

impl RoundResult {
    /// Whether the history was linearizable and every acknowledged write listed exactly once.
    pub fn correct(&self) -> bool {
        self.history.is_ok()
    }

    /// Whether every client thread was served again after the heal.
    pub fn recovered(&self) -> bool {
        self.threads.iter().all(|t| t.recovered)
    }
}

fn spec(job_id: u64) -> JobSpec {
    JobSpec {
        job_id,
        name: "nf".into(),
        user: "nf".into(),
        queue: String::new(),
        command: "true".into(),
        ncpus: 1,
        mem_mb: 1,
    }
}

fn ids(r: Result<Vec<xce_proto::wire::Job>, Error>) -> Result<Vec<u64>, Error> {
    r.map(|jobs| jobs.into_iter().map(|j| j.job_id).collect())
}

/// A client thread: enters the client namespace, then calls until `stop`.
fn client_thread(
    ns: String,
    masters: String,
    kind: Kind,
    origin: Instant,
    pace: Duration,
    stop: Arc<AtomicBool>,
    last_ok: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Result<Vec<Call>, String>> {
    std::thread::spawn(move || {
        netns::enter(&ns).map_err(|e| format!("enter {ns}: {e}"))?;
        let client = named_client(&masters, "netfaults")?;
        let mut calls = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let invoked = origin.elapsed();
            let (id, result) = match kind {
                Kind::Writer => {
                    let id = new_job_id();
                    (id, client.jobsubmit(spec(id)).map(|_| Vec::new()))
                }
                Kind::Reader => (0, ids(client.joblist(JobFilter::default()))),
            };
            let completed = origin.elapsed();
            if result.is_ok() {
                last_ok.store(completed.as_nanos() as u64, Ordering::Relaxed);
            }
            calls.push(Call {
                invoked,
                completed,
                id,
                result,
            });
            std::thread::sleep(pace);
        }
        Ok(calls)
    })
}

/// The thread's longest gap between successes that ends after `fault`: (length, end).
fn longest_gap(calls: &[Call], start: Duration, fault: Duration) -> Option<(Duration, Duration)> {
    let mut last = start;
    let mut best: Option<(Duration, Duration)> = None;
    for c in calls.iter().filter(|c| c.result.is_ok()) {
        if c.completed > fault {
            let gap = c.completed.saturating_sub(last);
            if best.is_none_or(|(g, _)| gap > g) {
                best = Some((gap, c.completed));
            }
        }
        last = last.max(c.completed);
    }
    best
}

/// Runs one round of `scenario` on a fresh cluster: clients calling, the fault, every client
/// served again, a final listing; the history checked.
pub fn round(scenario: Scenario, plan: &Plan) -> Result<RoundResult, String> {
    let cluster = NetCluster::start(3, &plan.controller_args, plan.log_dir.clone())
        .map_err(|e| format!("namespaces/cluster: {e}"))?;
    let p = cluster
        .wait_settled(ROUND_BOUND)
        .ok_or("no primary that every node follows")?;
    let masters = cluster.masters();
    let origin = Instant::now();
    let clients = Clients::start(&cluster, &masters, plan, origin);
    let outcome = run_fault(&cluster, scenario, p, plan, origin, &clients.last_ok);
    let per_thread = clients.stop()?;
    let (t_fault, t_healed, new_primary, silent) = outcome?;
    let final_read = final_listing(&cluster, &masters, origin)?;
    let (mut history, threads) = record(&per_thread, plan, t_fault, t_healed)?;
    let writes_acked = history.writes.iter().filter(|w| w.acked).count();
    let writes_failed = history.writes.len() - writes_acked;
    let reads = history.reads.len();
    history.reads.push(final_read);
    let checked = linearizable::check(&history);
    Ok(RoundResult {
        scenario,
        old_primary: p,
        new_primary,
        silent_elected: silent,
        threads,
        writes_acked,
        writes_failed,
        reads,
        history: checked,
    })
}

/// The round's client threads: [`Plan::writers`] writers, then [`Plan::readers`] readers, in
/// the client namespace, each noting the time of its last success.
struct Clients {
    kinds: Vec<Kind>,
    stop: Arc<AtomicBool>,
    last_ok: Vec<Arc<AtomicU64>>,
    handles: Vec<std::thread::JoinHandle<Result<Vec<Call>, String>>>,
}

impl Clients {
    fn start(cluster: &NetCluster, masters: &str, plan: &Plan, origin: Instant) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let kinds: Vec<Kind> = std::iter::repeat_n(Kind::Writer, plan.writers)
            .chain(std::iter::repeat_n(Kind::Reader, plan.readers))
            .collect();
        let last_ok: Vec<Arc<AtomicU64>> = kinds.iter().map(|_| Arc::default()).collect();
        let handles = kinds
            .iter()
            .zip(&last_ok)
            .map(|(&k, last)| {
                client_thread(
                    cluster.client_ns.clone(),
                    masters.to_string(),
                    k,
                    origin,
                    plan.pace,
                    stop.clone(),
                    last.clone(),
                )
            })
            .collect();
        Clients {
            kinds,
            stop,
            last_ok,
            handles,
        }
    }

    /// Stops every thread: each one's kind and calls.
    fn stop(self) -> Result<Vec<(Kind, Vec<Call>)>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut per_thread = Vec::new();
        for (h, kind) in self.handles.into_iter().zip(self.kinds) {
            per_thread.push((kind, h.join().map_err(|_| "client thread panicked")??));
        }
        Ok(per_thread)
    }
}

/// The final listing, after every call has completed: the history's last read.
fn final_listing(cluster: &NetCluster, masters: &str, origin: Instant) -> Result<Read, String> {
    let masters = masters.to_string();
    netns::in_ns(&cluster.client_ns, move || {
        let c = named_client(&masters, "netfaults")?;
        let invoked = origin.elapsed();
        let ids = ids(c.joblist(JobFilter::default())).map_err(|e| e.to_string())?;
        Ok::<_, String>(Read {
            invoked,
            completed: origin.elapsed(),
            ids,
        })
    })
    .map_err(|e| format!("final listing: {e}"))?
    .map_err(|e| format!("final listing: {e}"))
}

/// The history of the threads' calls (writes, and the reads that succeeded), and what each
/// thread saw of the fault (`t_fault`) and after the heal (`t_healed`).
fn record(
    per_thread: &[(Kind, Vec<Call>)],
    plan: &Plan,
    t_fault: Duration,
    t_healed: Duration,
) -> Result<(History, Vec<ThreadResult>), String> {
    let mut history = History::default();
    let mut threads = Vec::new();
    for (kind, calls) in per_thread {
        let kind = *kind;
        for c in calls {
            match kind {
                Kind::Writer => history.writes.push(Write {
                    id: c.id,
                    invoked: c.invoked,
                    completed: c.completed,
                    acked: c.result.is_ok(),
                }),
                Kind::Reader => {
                    if let Ok(ids) = &c.result {
                        history.reads.push(Read {
                            invoked: c.invoked,
                            completed: c.completed,
                            ids: ids.clone(),
                        });
                    }
                }
            }
        }
        threads.push(thread_result(kind, calls, plan, t_fault, t_healed)?);
    }
    Ok((history, threads))
}

/// What one thread saw: its longest gap ending after the fault, its errors after the fault,
/// whether it succeeded after the heal.
fn thread_result(
    kind: Kind,
    calls: &[Call],
    plan: &Plan,
    t_fault: Duration,
    t_healed: Duration,
) -> Result<ThreadResult, String> {
    let after: Vec<&Call> = calls.iter().filter(|c| c.completed > t_fault).collect();
    let (unavailable, end) = longest_gap(calls, plan.warmup / 2, t_fault)
        .ok_or_else(|| format!("a {kind:?} thread never succeeded after the fault"))?;
    Ok(ThreadResult {
        kind,
        unavailable,
        served_again: end.saturating_sub(t_fault),
        not_ready: after
            .iter()
            .filter(|c| c.result.as_ref().err() == Some(&Error::NotReady))
            .count(),
        other_errors: after
            .iter()
            .filter_map(|c| c.result.as_ref().err().copied())
            .filter(|e| *e != Error::NotReady)
            .collect(),
        recovered: calls
            .iter()
            .any(|c| c.result.is_ok() && c.completed > t_healed),
    })
}

type FaultTimes = (Duration, Duration, Option<(u32, Duration)>, bool);

/// Warm-up, fault, heal, and waiting for every thread to be served again. Returns the fault
/// and heal instants (from `origin`), the new primary and whether it is the silent standby.
fn run_fault(
    cluster: &NetCluster,
    scenario: Scenario,
    p: u32,
    plan: &Plan,
    origin: Instant,
    last_ok: &[Arc<AtomicU64>],
) -> Result<FaultTimes, String> {
    std::thread::sleep(plan.warmup);
    let n = cluster.nodes.len() as u32;
    let silent = p % n + 1; // the master after the primary in list order
    let (faults, prelude) = match scenario {
        Scenario::BlackholedPrimary => (vec![Fault::Blackhole(p)], None),
        Scenario::IsolatedPrimary => (vec![Fault::CutFromPeers(p)], None),
        Scenario::SilentStandbyThenBlackhole => (
            vec![Fault::Blackhole(p)],
            Some(Fault::SilentToClients(silent)),
        ),
    };
    let err = |e: std::io::Error| format!("fault: {e}");
    if let Some(f) = prelude {
        cluster.fault(f, true).map_err(err)?;
        std::thread::sleep(Duration::from_secs(1));
    }
    let t_fault = origin.elapsed();
    for &f in &faults {
        cluster.fault(f, true).map_err(err)?;
    }
    if std::env::var_os("XCE_LOG").is_some() {
        // The trace's origin: the library's log lines are stamped on the same clock.
        eprintln!("{} fault {faults:?} set", wall());
    }
    // Which node takes over, probed (from the client namespace) while the fault lasts. The
    // silent standby cannot be probed by clients: seen as "nobody" then.
    let fault_end = Instant::now() + plan.fault_for;
    let new_primary = cluster
        .wait_primary(Some(p), plan.fault_for)
        .map(|id| (id, origin.elapsed().saturating_sub(t_fault)));
    std::thread::sleep(fault_end.saturating_duration_since(Instant::now()));
    for &f in faults.iter().chain(prelude.iter()) {
        cluster.fault(f, false).map_err(err)?;
    }
    if std::env::var_os("XCE_LOG").is_some() {
        eprintln!("{} faults healed", wall());
    }
    let t_healed = origin.elapsed();
    let silent_elected = scenario == Scenario::SilentStandbyThenBlackhole
        && new_primary.is_none()
        && cluster.wait_primary(Some(p), Duration::from_secs(5)) == Some(silent);
    // Every thread served after the heal (bounded), then a little steady service.
    let deadline = Instant::now() + ROUND_BOUND;
    while Instant::now() < deadline
        && last_ok
            .iter()
            .any(|t| Duration::from_nanos(t.load(Ordering::Relaxed)) <= t_healed)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    Ok((t_fault, t_healed, new_primary, silent_elected))
}

/// Rounds of each scenario. The silent-standby scenario runs until it has `rounds` rounds of
/// each outcome — the other standby elected, and the silent one elected (the new primary
/// silent to clients, a row of its own) — in at most `4 × rounds` rounds (which standby wins
/// is the election's choice). `progress` is told about each round.
pub fn run(
    scenarios: &[Scenario],
    rounds: usize,
    plan: &Plan,
    mut progress: impl FnMut(&RoundResult),
) -> Result<Vec<RoundResult>, String> {
    let mut all = Vec::new();
    for &s in scenarios {
        let (mut other, mut silent, mut tries) = (0, 0, 0);
        let enough = |other: usize, silent: usize| {
            other >= rounds && (s != Scenario::SilentStandbyThenBlackhole || silent >= rounds)
        };
        while !enough(other, silent) && tries < 4 * rounds {
            tries += 1;
            let r = round(s, plan)?;
            progress(&r);
            if r.silent_elected {
                silent += 1;
            } else {
                other += 1;
            }
            all.push(r);
        }
    }
    Ok(all)
}

/// Wall-clock seconds within the current 1000 s, ms resolution: the stamp of trace lines
/// (`XCE_LOG` set), so that a round's fault and the library's lines can be put on one timeline.
pub fn wall() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:.3}", t.as_secs_f64() % 1000.0)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The P9 table over `results`: a row per fault (and one for the rounds where the silent
/// standby was elected), the history, the three targets.
pub fn table(results: &[RoundResult], plan: &Plan) -> Table {
    let mut t = Table::new("P9", "network faults: fault → clients served again");
    t.note(format!(
        "3 controllers, each in its own network namespace (client and peer networks on two \
         bridges), {} writers (jobsubmit) + {} readers (joblist) through xce::client::Client in \
         a client namespace, default budget, {} ms between calls; fault lasts {:.1} s; a fresh \
         cluster per round; controller timing: {}",
        plan.writers,
        plan.readers,
        plan.pace.as_millis(),
        secs(plan.fault_for),
        plan.timing()
    ));
    t.note(
        "unavailability: a thread's longest time between two successes (ending after the fault); \
         served again: fault → the success ending it",
    );
    t.columns(&[
        "fault",
        "rounds",
        "new primary s (median)",
        "served again s: writers median",
        "readers median",
        "unavail. s: median",
        "max",
        "NOT_READY",
        "other errors",
        "linearizable",
    ]);
    // The rounds where the silent standby won are a row of their own: the new primary silent
    // to every client (F28: served through the other standby, which forwards).
    let kinds = Scenario::ALL
        .into_iter()
        .map(|s| (s, false))
        .chain([(Scenario::SilentStandbyThenBlackhole, true)]);
    let rows: Vec<Row> = kinds.filter_map(|(s, e)| row(results, s, e)).collect();
    for r in &rows {
        t.row(r.cells.clone());
    }
    let bad = violations(results);
    history(&mut t, results, &bad);
    targets(&mut t, results, &rows, &bad);
    t
}

/// One row of the P9 table, and what the targets read from it.
struct Row {
    scenario: Scenario,
    silent_elected: bool,
    name: &'static str,
    cells: Vec<String>,
    unavailable: Option<Summary>,
    not_ready: usize,
}

/// The row of the rounds of `s` whose silent standby was elected or not (`None`: no such round).
fn row(results: &[RoundResult], s: Scenario, silent_elected: bool) -> Option<Row> {
    let rs: Vec<&RoundResult> = results
        .iter()
        .filter(|r| r.scenario == s && r.silent_elected == silent_elected)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let name = if silent_elected {
        "the silent standby elected: new primary silent to clients"
    } else {
        s.name()
    };
    let threads = || rs.iter().flat_map(|r| &r.threads);
    let med = |v: Vec<f64>| Summary::of(&v).map_or("-".to_string(), |s| num(s.p50));
    let elected: Vec<f64> = rs
        .iter()
        .filter_map(|r| r.new_primary.map(|(_, d)| secs(d)))
        .collect();
    let served = |k: Kind| -> Vec<f64> {
        threads()
            .filter(|t| t.kind == k)
            .map(|t| secs(t.served_again))
            .collect()
    };
    let u = Summary::of(&threads().map(|t| secs(t.unavailable)).collect::<Vec<_>>());
    let not_ready: usize = threads().map(|t| t.not_ready).sum();
    let other: usize = threads().map(|t| t.other_errors.len()).sum();
    let lin = rs.iter().filter(|r| r.correct()).count();
    let repeated = results
        .iter()
        .filter(|r| r.scenario == s && r.silent_elected)
        .count();
    let cells = vec![
        name.to_string(),
        if repeated > 0 && !silent_elected {
            format!("{} (+{repeated} silent standby elected)", rs.len())
        } else {
            rs.len().to_string()
        },
        med(elected),
        med(served(Kind::Writer)),
        med(served(Kind::Reader)),
        u.map_or("-".into(), |u| num(u.p50)),
        u.map_or("-".into(), |u| num(u.max)),
        not_ready.to_string(),
        other.to_string(),
        format!("{lin}/{}", rs.len()),
    ];
    Some(Row {
        scenario: s,
        silent_elected,
        name,
        cells,
        unavailable: u,
        not_ready,
    })
}

/// The first few violations over every round's history.
fn violations(results: &[RoundResult]) -> Vec<String> {
    results
        .iter()
        .filter_map(|r| r.history.as_ref().err())
        .flatten()
        .take(5)
        .map(ToString::to_string)
        .collect()
}

/// The history of every round together: writes acknowledged and failed, reads, violations.
fn history(t: &mut Table, results: &[RoundResult], bad: &[String]) {
    let acked: usize = results.iter().map(|r| r.writes_acked).sum();
    let failed: usize = results.iter().map(|r| r.writes_failed).sum();
    let reads: usize = results.iter().map(|r| r.reads).sum();
    t.result(format!(
        "history: {acked} acknowledged writes (all listed exactly once at the end: {}), {failed} \
         failed writes (outcome unknown), {reads} reads; violations: {}",
        if bad.is_empty() { "yes" } else { "NO" },
        if bad.is_empty() {
            "none".to_string()
        } else {
            bad.join("; ")
        }
    ));
}

/// Unavailability within P9's bounds (blackholed, isolated primary, new primary silent to
/// clients), no NOT_READY while the primary is isolated, every history linearizable.
fn targets(t: &mut Table, results: &[RoundResult], rows: &[Row], bad: &[String]) {
    let mut targets_ok = true;
    let mut target_detail = Vec::new();
    let mut no_not_ready = true;
    for r in rows {
        if r.scenario != Scenario::SilentStandbyThenBlackhole || r.silent_elected {
            if let Some(u) = r.unavailable {
                targets_ok &= u.p50 <= P9_P50_S && u.max <= P9_MAX_S;
                target_detail.push(format!("{}: {} / {} s", r.name, num(u.p50), num(u.max)));
            }
        }
        if r.scenario == Scenario::IsolatedPrimary {
            no_not_ready = r.not_ready == 0;
        }
    }
    t.target(
        format!(
            "per-thread unavailability ≤ {P9_P50_S} s median, ≤ {P9_MAX_S} s max (blackholed, isolated primary, new primary silent to clients; P9 raised)"
        ),
        Verdict::from(targets_ok, target_detail.join("; ")),
    );
    t.target(
        "no E_XCE_NOT_READY returned during an isolated-primary round",
        Verdict::from(no_not_ready, "default budget".into()),
    );
    t.target(
        "every history linearizable, every acknowledged write present exactly once",
        Verdict::from(bad.is_empty(), format!("{} rounds", results.len())),
    );
}

/// `xce-netfaults`: `rounds` rounds of each of `scenarios`, faults lasting `fault_for` (`None`:
/// [`plan`]'s), with the controller's defaults; the P9 table. Fails when a history was not
/// linearizable or a client was never served again.
pub fn command(rounds: usize, scenarios: &[Scenario], fault_for: Option<Duration>) -> ExitCode {
    if std::env::var_os("XCE_LOG").is_some() {
        // A timeline: stamped on the clock of the fault lines.
        xce::client::log::set_sink(Some(std::sync::Arc::new(|l, line: &str| {
            eprintln!("{} libxce {}: {line}", wall(), l.as_str())
        })));
    }
    let logs = log_dir("xce-netfaults");
    let defaults = plan();
    let plan = Plan {
        fault_for: fault_for.unwrap_or(defaults.fault_for),
        log_dir: Some(logs.clone()),
        ..defaults
    };
    let bin = crate::controller_bin();
    let what = format!("{rounds} rounds per fault; controller {}", bin.display());
    crate::harness::sides::first_line("xce-netfaults", &what, &logs);
    let started = Instant::now();
    let results = match run(scenarios, rounds, &plan, |r| eprintln!("  {}", describe(r))) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xce-netfaults: {e} (controller logs in {})", logs.display());
            return ExitCode::FAILURE;
        }
    };
    println!("{}", table(&results, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    if results.iter().all(|r| r.correct() && r.recovered()) {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "xce-netfaults: a history was not linearizable or a client was never served again"
        );
        ExitCode::FAILURE
    }
}

/// One line per round, for progress output.
pub fn describe(r: &RoundResult) -> String {
    let worst = r
        .threads
        .iter()
        .map(|t| t.unavailable)
        .max()
        .unwrap_or_default();
    let med = {
        let mut v: Vec<Duration> = r.threads.iter().map(|t| t.unavailable).collect();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    format!(
        "{}: primary {} → {}; unavailability median {:.2} s max {:.2} s; NOT_READY {}; {} acked, {} failed writes, {} reads; {}",
        r.scenario.name(),
        r.old_primary,
        match r.new_primary {
            Some((id, d)) => format!("{id} after {:.2} s", secs(d)),
            None if r.silent_elected => "the silent standby (silent to clients)".into(),
            None => "none seen during the fault".into(),
        },
        secs(med),
        secs(worst),
        r.threads.iter().map(|t| t.not_ready).sum::<usize>(),
        r.writes_acked,
        r.writes_failed,
        r.reads,
        match &r.history {
            Ok(()) => "linearizable".to_string(),
            Err(v) => format!(
                "NOT LINEARIZABLE: {}",
                v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
            ),
        }
    )
}
