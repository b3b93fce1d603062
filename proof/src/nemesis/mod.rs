//! S18 and S20, the nemesis (acceptance.md): a seeded, randomised schedule of faults, held
//! together in composed episodes (S20), over three real `xce-controller` processes, each in
//! its own network namespace
//! ([`crate::harness::netns::NetCluster`], root), while 8 client threads write and list
//! through the library; at the end every fault is healed and the run is checked.
//!
//! - [`crate::rng`]: the seeded generator (one seed, one schedule, in every build);
//! - [`schedule`]: the episodes a seed names — when, which faults (composed: a node cut off
//!   held with another node's fault), on which roles, how long; how many overlapped;
//! - [`fault`]: the fault kinds, one variant each with `apply`/`heal`; the kinds whose
//!   mechanism is not on main yet are listed and cannot be selected;
//! - [`executor`]: runs the schedule and writes down what happened, with timestamps;
//! - [`clients`]: the 8 threads (4 contexts of their own, 4 sharing one) and their history;
//! - [`sequence`]: issue 35's defect 1 as one schedule (the kind `deposed-primary`, and
//!   `tests/composed_faults.rs`);
//! - [`checks`]: linearizable history (porcupine's algorithm job by job and key by key, and
//!   the home-made conditions), every acknowledged write exactly once, one primary per term,
//!   no node stuck, node states equal (C19's consistency check).
//!
//! `xce-nemesis --seed N --minutes M` (`src/bin/xce-nemesis.rs`) runs it; `tests/nemesis.rs`
//! runs one minute of it in the test command.

pub mod checks;
pub mod clients;
pub mod executor;
pub mod fault;
pub mod schedule;
pub mod sequence;

/// Why a step did not happen as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// The harness could not do it (`ip`, `tc`, a spawn failed): the run stops, it proves
    /// nothing about the cluster.
    Harness(String),
    /// The cluster did not do what it must (a membership change refused or never done): a
    /// finding, reported; the run goes on.
    Cluster(String),
}

/// A harness failure doing `what` (the run stops: it proves nothing about the cluster).
pub(super) fn harness(what: &str) -> impl FnOnce(std::io::Error) -> Trouble + '_ {
    move |e| Trouble::Harness(format!("{what}: {e}"))
}

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use checks::{Check, FinalRead, Verdict};
use clients::{Call, CallOp, Clients};
use executor::{Executed, Executor, Line};
use fault::{Effect, Kind};
use schedule::Schedule;

use crate::bench::nodelog::utc;
use crate::bench::table::{num, Table};
use crate::harness::netns::NetCluster;

/// Bound on the first election, and on service again after the end's heal.
const START_BOUND: Duration = Duration::from_secs(60);
/// "No node stuck": how long the healed cluster gets to settle.
pub const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// The node log lines a failure shows (the last ones of these kinds).
const LOG_PATTERNS: [&str; 12] = [
    "role=",
    "raft stopped",
    "panic",
    "error",
    "refus",
    "member",
    "snapshot",
    "handover",
    "initialis",
    "catching up",
    "caught up",
    "quorum",
];
const LOG_LINES_SHOWN: usize = 300;

/// What a run is.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub length: Duration,
    /// The kinds the schedule draws from (none pending: see [`Kind::pending`]).
    pub kinds: Vec<Kind>,
    /// Extra `xce-controller run` flags for every node.
    pub controller_args: Vec<String>,
    /// Where the node logs go (`node-N.log`); kept.
    pub log_dir: PathBuf,
    /// Print each step as it happens.
    pub live: bool,
}

impl Options {
    /// The command line that replays this run.
    pub fn replay(&self) -> String {
        let mut s = format!(
            "xce-nemesis --seed {} --minutes {}",
            self.seed,
            self.length.as_secs_f64() / 60.0
        );
        if self.kinds != Kind::selectable() {
            let names: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
            s.push_str(&format!(" --faults {}", names.join(",")));
        }
        if !self.controller_args.is_empty() {
            s.push_str(&format!(" --args '{}'", self.controller_args.join(" ")));
        }
        s
    }
}

/// A seed from the clock, for a run not given one (printed, so it can be replayed).
pub fn seed_from_time() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)) % 1_000_000_000
}

/// `Err` when a kind cannot be selected: which, and why.
pub fn refuse_pending(kinds: &[Kind]) -> Result<(), String> {
    let pending: Vec<String> = kinds
        .iter()
        .filter_map(|k| k.pending().map(|why| format!("{}: {why}", k.name())))
        .collect();
    if pending.is_empty() {
        Ok(())
    } else {
        Err(format!("not selectable yet — {}", pending.join("; ")))
    }
}

/// What a run found.
pub struct Report {
    pub opts: Options,
    pub schedule: Schedule,
    pub executed: Executed,
    /// The harness failed: the run proves nothing about the cluster.
    pub aborted: Option<String>,
    pub calls: Vec<Call>,
    /// Stop time of the clients, from the origin.
    pub stopped_at: Duration,
    pub elections: usize,
    pub nodes_at_end: Vec<String>,
    pub checks: Vec<Check>,
    /// When the first violation happened (from the origin), if one did.
    pub suspect: Option<checks::Span>,
    /// The wall-clock time (UTC) of the origin, to find the node log lines of a time.
    pub origin_utc: SystemTime,
    /// The node log lines a failure shows.
    pub log_excerpt: String,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.aborted.is_none() && !self.checks.iter().any(Check::failed)
    }
}

/// Runs the nemesis: the cluster, the clients, the schedule, the end's heal and checks.
/// `Err` only when it could not start (namespaces, the first election).
pub fn run(opts: &Options) -> Result<Report, String> {
    refuse_pending(&opts.kinds)?;
    let schedule = Schedule::generate(opts.seed, opts.length, &opts.kinds);
    let mut args = fault::controller_args();
    args.extend(opts.controller_args.iter().cloned());
    let mut cluster = NetCluster::start(schedule::NODES, &args, Some(opts.log_dir.clone()))
        .map_err(|e| format!("namespaces/cluster: {e}"))?;
    cluster
        .wait_primary(None, START_BOUND)
        .ok_or_else(|| format!("no primary elected: {}", cluster.log_lines(&["role="])))?;
    if opts.kinds.iter().any(|k| k.uses_failpoints()) {
        // A controller without failpoints would abort the run at its first such fault.
        let bound = Duration::from_secs(5);
        match cluster.node_http(1, fault::METRICS_PORT, "GET", "/fail", "", bound) {
            Ok((status, _)) if status.contains(" 200 ") => {}
            got => {
                return Err(format!(
                    "{} has no failpoints (GET /fail on node 1: {got:?}): build it with \
                     `--features xce-controller/failpoints`, or leave out --no-build",
                    crate::controller_bin().display()
                ))
            }
        }
    }
    let (origin, origin_utc) = (Instant::now(), SystemTime::now());
    let clients = Clients::start(&cluster, opts.seed, origin)?;
    let mut exec = Executor::new(&mut cluster, origin, opts.live);
    exec.note(format!(
        "start: seed {}, {} episodes; 0 s is {} in the node logs",
        opts.seed,
        schedule.episodes.len(),
        utc(origin_utc)
    ));
    let aborted = exec
        .run(&schedule)
        .and_then(|()| {
            // The clients go on, fault-free, until the run's length.
            std::thread::sleep((origin + opts.length).saturating_duration_since(Instant::now()));
            exec.heal_everything()
        })
        .err();
    let healed = Instant::now();
    let mut checks = Vec::new();
    if aborted.is_none() {
        checks.push(served_again(&clients, origin, &mut exec));
    }
    let stopped_at = origin.elapsed();
    let calls = clients.stop()?;
    let executed = std::mem::take(&mut exec.done);
    drop(exec);
    let mut report = Report {
        opts: opts.clone(),
        schedule,
        executed,
        aborted,
        calls,
        stopped_at,
        elections: 0,
        nodes_at_end: Vec::new(),
        checks,
        suspect: None,
        origin_utc,
        log_excerpt: String::new(),
    };
    if report.aborted.is_none() {
        end_checks(&cluster, &mut report, origin, healed);
    }
    report.log_excerpt = log_excerpt(&cluster, &report);
    Ok(report)
}

/// The node log lines of interest around the first violation (from 10 s before to 5 s
/// after), else the last ones; at most [`LOG_LINES_SHOWN`].
fn log_excerpt(cluster: &NetCluster, r: &Report) -> String {
    let log = cluster.log_lines(&LOG_PATTERNS);
    let mut lines: Vec<&str> = log.lines().collect();
    if let Some((from, to)) = r.suspect {
        // Stamps sort as text (`2026-12-03T11:55:18.303Z`).
        let lo = utc(r.origin_utc + from.saturating_sub(Duration::from_secs(10)));
        let hi = utc(r.origin_utc + to + Duration::from_secs(5));
        lines.retain(|l| {
            l.get(..24)
                .is_some_and(|t| t >= lo.as_str() && t <= hi.as_str())
        });
    }
    lines[lines.len().saturating_sub(LOG_LINES_SHOWN)..].join("\n")
}

/// Every client thread served again after the end's heal (bounded).
fn served_again(clients: &Clients, origin: Instant, exec: &mut Executor<'_>) -> Check {
    let healed = origin.elapsed();
    let deadline = Instant::now() + SETTLE_BOUND;
    while !clients.all_served_after(healed) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let late = clients.not_served_after(healed);
    let took = origin.elapsed() - healed;
    exec.note(format!(
        "end: clients served again: {} of 8",
        8 - late.len()
    ));
    Check {
        name: "every client thread served again after the heal",
        verdict: if late.is_empty() {
            Verdict::Passed(format!("within {:.1} s", took.as_secs_f64()))
        } else {
            Verdict::Failed(format!(
                "threads {late:?} had no success in the {} s after the heal",
                SETTLE_BOUND.as_secs()
            ))
        },
    }
}

/// The checks of a run that went to its end: no node stuck, the final listing, the history,
/// one primary per term, no node exited on its own, node states equal.
fn end_checks(cluster: &NetCluster, r: &mut Report, origin: Instant, healed: Instant) {
    let settled = checks::settle(cluster, healed, SETTLE_BOUND);
    r.nodes_at_end = settled.nodes;
    let end = settled.end;
    r.checks.push(Check {
        name: "no node stuck (every member answers, one primary, applied = commit, members whole)",
        verdict: settled.verdict,
    });
    match clients::final_listing(cluster, origin) {
        Ok((jobs, invoked, completed)) => {
            let last = FinalRead {
                jobs: &jobs,
                invoked,
                completed,
            };
            let (by_key, foreign) = checks::histories(&r.calls, &last);
            let ((by_job, whole), wgl_span) = checks::porcupine(&by_key, checks::WHOLE_KEY_BUDGET);
            r.checks.push(Check {
                name: "the client history is linearizable job by job (porcupine's algorithm, \
                       P-compositional: each job's submit and every listing of its key)",
                verdict: by_job,
            });
            r.checks.push(Check {
                name: "… and key by key as one set (porcupine's algorithm, unpartitioned: \
                       every listing one moment of its key's jobs)",
                verdict: whole,
            });
            let (verdict, lin_span) = checks::linearizable(&by_key, &foreign);
            r.checks.push(Check {
                name: "… and by the conditions of check::linearizable (listings a chain in \
                       real time, acknowledged writes, write order; jobs of no key)",
                verdict,
            });
            let (verdict, once_span) = checks::exactly_once(&r.calls, &jobs);
            r.checks.push(Check {
                name: "every acknowledged write listed exactly once",
                verdict,
            });
            r.suspect = wgl_span.or(lin_span).or(once_span);
        }
        Err(e) => r.checks.push(Check {
            name: "the final listing",
            verdict: Verdict::Failed(e),
        }),
    }
    let by_term = checks::primaries_by_term(&cluster.log_lines(&["role=primary"]));
    r.elections = by_term.len();
    r.checks.push(Check {
        name: "one primary per term",
        verdict: checks::one_primary_per_term(&by_term),
    });
    r.checks.push(Check {
        name: "the cluster did what it must (no node exited on its own, membership changes done)",
        verdict: if r.executed.findings.is_empty() {
            Verdict::Passed("no finding during the run".into())
        } else {
            Verdict::Failed(r.executed.findings.join("; "))
        },
    });
    r.checks.push(Check {
        name: "every node's state equal (C19's consistency check, no alarm, no node diverged)",
        verdict: checks::digests_equal(cluster, end, &r.executed.diverged),
    });
    r.checks.push(exercised(r));
}

/// A run that applied no fault, or acknowledged no write or read nothing, shows nothing.
fn exercised(r: &Report) -> Check {
    let faults: usize = r.executed.applied.values().sum();
    let [acked, _, reads, _] = call_counts(&r.calls);
    let what = format!("{faults} faults applied, {acked} writes acknowledged, {reads} reads");
    Check {
        name: "the run exercised the cluster",
        verdict: if faults > 0 && acked > 0 && reads > 0 {
            Verdict::Passed(what)
        } else {
            Verdict::Failed(what)
        },
    }
}

/// The longest time no client call succeeded (from the first success to the clients'
/// stop), and when it began.
fn longest_unavailability(calls: &[Call], stopped: Duration) -> Option<(Duration, Duration)> {
    let mut ok: Vec<Duration> = calls
        .iter()
        .filter(|c| c.ok())
        .map(|c| c.completed)
        .collect();
    ok.sort();
    ok.push(stopped);
    ok.windows(2)
        .map(|w| (w[1].saturating_sub(w[0]), w[0]))
        .max_by_key(|&(gap, _)| gap)
}

/// Counts of the client calls: (writes acked, failed; reads ok, failed).
fn call_counts(calls: &[Call]) -> [usize; 4] {
    let mut n = [0; 4];
    for c in calls {
        let i = match (&c.op, c.ok()) {
            (CallOp::Write { .. }, true) => 0,
            (CallOp::Write { .. }, false) => 1,
            (CallOp::Read { .. }, true) => 2,
            (CallOp::Read { .. }, false) => 3,
        };
        n[i] += 1;
    }
    n
}

impl Report {
    /// The summary table: faults by kind, client calls, elections, the longest
    /// unavailability, the nodes at the end, the checks.
    pub fn summary(&self) -> Table {
        let mut t = Table::new(
            "S18",
            format!(
                "nemesis: seed {}, {:.0} s, {} episodes",
                self.opts.seed,
                self.opts.length.as_secs_f64(),
                self.schedule.episodes.len()
            ),
        );
        t.note(format!(
            "3 controllers ({}), each in its own network namespace; 8 client threads through \
             the library in a client namespace (4 with a context each, 4 sharing one), writing \
             fresh job ids and listing, 5–30 ms apart",
            crate::controller_bin().display()
        ));
        t.header = ["what", "count"].map(String::from).to_vec();
        for k in Kind::ALL {
            let n = self.executed.applied.get(&k).copied().unwrap_or(0);
            let cell = match k.pending() {
                Some(_) => "not selectable yet".to_string(),
                None if !self.opts.kinds.contains(&k) => "not selected".to_string(),
                None => format!("{n} (planned {})", self.schedule.count(k)),
            };
            t.row(vec![format!("fault {}", k.name()), cell]);
        }
        self.overlap_rows(&mut t);
        let exits = &self.executed.expected_exits;
        let slowest = exits
            .iter()
            .map(|(_, d)| d.as_secs_f64())
            .fold(0.0, f64::max);
        t.row(vec![
            "disk full: nodes that exited 74 as they must (slowest s)".to_string(),
            if exits.is_empty() {
                "0".to_string()
            } else {
                format!("{} ({})", exits.len(), num(slowest))
            },
        ]);
        let [wa, wf, ra, rf] = call_counts(&self.calls);
        let rows = [
            ("writes acknowledged", wa),
            ("writes failed (outcome unknown)", wf),
            ("reads", ra),
            ("reads failed", rf),
            (
                "elections (terms with a primary, from the node logs)",
                self.elections,
            ),
        ];
        for (what, n) in rows {
            t.row(vec![what.to_string(), n.to_string()]);
        }
        if let Some((gap, from)) = longest_unavailability(&self.calls, self.stopped_at) {
            t.row(vec![
                format!(
                    "longest unavailability s (no call succeeded, from {:.1} s)",
                    from.as_secs_f64()
                ),
                num(gap.as_secs_f64()),
            ]);
        }
        for n in &self.nodes_at_end {
            t.result(format!("at the end: {n}"));
        }
        for c in &self.checks {
            t.result(c.to_string());
        }
        t
    }

    /// S20: how many episodes held faults together, and which effects overlapped (the two
    /// the spec names always shown, the others when they happened or were planned).
    fn overlap_rows(&self, t: &mut Table) {
        let planned = self.schedule.kinds();
        let done = &self.executed.episodes;
        t.row(vec![
            "episodes whose faults overlapped (S20)".to_string(),
            format!(
                "{} of {} (planned {} of {})",
                schedule::composed(done),
                done.len(),
                schedule::composed(&planned),
                planned.len()
            ),
        ]);
        let (did, plan) = (schedule::overlaps(done), schedule::overlaps(&planned));
        let others: BTreeSet<(Effect, Effect)> = did
            .keys()
            .chain(plan.keys())
            .filter(|p| !schedule::NAMED_OVERLAPS.contains(p))
            .copied()
            .collect();
        for (a, b) in schedule::NAMED_OVERLAPS.into_iter().chain(others) {
            let n = |m: &BTreeMap<(Effect, Effect), usize>| m.get(&(a, b)).copied().unwrap_or(0);
            t.row(vec![
                format!("  overlapped: {} + {}", a.label(), b.label()),
                format!("{} (planned {})", n(&did), n(&plan)),
            ]);
        }
    }

    /// Everything a failure needs: the seed, how to replay, the schedule as executed, the
    /// checks, the node log lines, where the logs are.
    pub fn failure(&self) -> String {
        let mut s = format!(
            "S18 FAILED — seed {}; replay: {}\n",
            self.opts.seed,
            self.opts.replay()
        );
        if let Some(why) = &self.aborted {
            s.push_str(&format!(
                "the nemesis itself failed (not a finding about the cluster): {why}\n"
            ));
        }
        s.push_str("schedule as executed:\n");
        for Line { at, text } in &self.executed.lines {
            s.push_str(&format!("  {:>8.3} s  {text}\n", at.as_secs_f64()));
        }
        for c in self.checks.iter().filter(|c| c.failed()) {
            s.push_str(&format!("{c}\n"));
        }
        let which = match self.suspect {
            Some((from, to)) => format!(
                "of interest from 10 s before the first violation ({:.3}–{:.3} s) to 5 s after",
                from.as_secs_f64(),
                to.as_secs_f64()
            ),
            None => "of interest, the last ones".to_string(),
        };
        s.push_str(&format!(
            "node log lines {which} (at most {LOG_LINES_SHOWN}; 0 s is {}):\n{}\n",
            utc(self.origin_utc),
            self.log_excerpt
        ));
        s.push_str(&format!("node logs: {}\n", self.opts.log_dir.display()));
        s
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.summary())?;
        if !self.passed() {
            write!(f, "{}", self.failure())?;
        }
        writeln!(f, "replay: {}", self.opts.replay())?;
        writeln!(f, "node logs: {}", self.opts.log_dir.display())
    }
}

/// `xce-nemesis`: one run; prints the schedule first, each step as it happens, the summary
/// (and on failure everything [`Report::failure`] says). Exit 0 when every check passed.
pub fn command(opts: Options) -> ExitCode {
    println!(
        "{}",
        Schedule::generate(opts.seed, opts.length, &opts.kinds)
    );
    println!(
        "xce-nemesis: seed {}; controller {}; node logs in {}{}",
        opts.seed,
        crate::controller_bin().display(),
        opts.log_dir.display(),
        if cfg!(debug_assertions) {
            "; (a debug build of the nemesis: fewer calls per second)"
        } else {
            ""
        }
    );
    match run(&opts) {
        Ok(r) => {
            println!("{r}");
            if r.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!(
                "xce-nemesis: {e} (seed {}; replay: {})",
                opts.seed,
                opts.replay()
            );
            ExitCode::FAILURE
        }
    }
}
