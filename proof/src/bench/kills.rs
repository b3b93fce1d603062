//! Runs the kill rounds of [`super::failover`] and turns them into the P3, P4, P5 and P6 tables
//! (and the SVG of one failover).

use std::time::{Duration, Instant};

use super::failover::{kill_round, timeline_round, CallRecord, Policy, Rig, Round, PROBE_INTERVAL};
use super::plan::BEFORE_C15;
use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};
use crate::Cluster;

/// Client counts of the acceptance table.
pub const CROWD: usize = 200;
pub const HERD: usize = 1000;
/// The P6 window and its limit.
const HERD_WINDOW: Duration = Duration::from_millis(10);
const HERD_MAX_SHARE: f64 = 0.20;
/// P4 wants a median over at least this many kills.
const P4_MIN_KILLS: usize = 20;
/// P4 (raised, C15): kill → first success, median and p99 (ms).
const P4_P50_MS: f64 = 150.0;
const P4_P99_MS: f64 = 300.0;
/// What one series of one-client kills measured.
#[derive(Default)]
struct Series {
    ours: Group,
    /// kill → new primary ready, ms.
    election: Vec<f64>,
    rounds: usize,
    error: Option<String>,
}

/// `kills` kills of the primary of a fresh 3-node cluster started with `extra` flags, one
/// client of ours released at each (P4's comparison with the timing before C15).
fn one_client_series(opts: &BenchOpts, extra: &[&str], kills: usize) -> Series {
    let mut s = Series::default();
    let mut copts = opts.cluster_opts();
    copts.extra_args = extra.iter().map(|a| a.to_string()).collect();
    let mut cluster = match Cluster::start(3, copts) {
        Ok(c) => c,
        Err(e) => {
            s.error = Some(format!("start cluster: {e}"));
            return s;
        }
    };
    if cluster.wait_primary(Duration::from_secs(20)).is_none() {
        s.error = Some("no primary elected within 20 s".into());
        return s;
    }
    let rig = match Rig::new(1, Policy::Ours, &cluster.masters(), false) {
        Ok(r) => r,
        Err(e) => {
            s.error = Some(e);
            return s;
        }
    };
    for k in 0..kills {
        match kill_round(&mut cluster, &[&rig]) {
            Ok(r) => {
                s.ours.add(&r, &r.calls[0], 1);
                if let Some(rd) = r.ready {
                    s.election.push(Round::ms(r.t_kill, rd.sent));
                }
                s.rounds += 1;
                eprintln!(
                    "  kill {}/{kills} ({}): ready after {} ms, first success {} ms after the kill",
                    k + 1,
                    extra.join(" "),
                    r.ready
                        .map_or("?".into(), |rd| num(Round::ms(r.t_kill, rd.sent))),
                    r.calls[0]
                        .first()
                        .map_or("-".into(), |c| num(Round::ms(r.t_kill, c.end)))
                );
            }
            Err(e) => {
                s.error = Some(format!("kill {}: {e}", k + 1));
                break;
            }
        }
    }
    s
}

/// The outcome of one group of calls in one round, relative to the round's marks.
#[derive(Default)]
struct Group {
    /// first success − ready, ms (rounds where the prober saw the new primary).
    added: Vec<f64>,
    /// Per successful call: retries, rotations, ms in backoff/waitPrimary.
    retries: Vec<f64>,
    rotations: Vec<f64>,
    backoff: Vec<f64>,
    /// first success − kill, ms.
    total: Vec<f64>,
    failed: Vec<String>,
    missing: usize,
}

impl Group {
    fn add(&mut self, round: &Round, calls: &[CallRecord], expected: usize) {
        for c in calls {
            match &c.error {
                None => {
                    self.total.push(Round::ms(round.t_kill, c.end));
                    self.retries.push(c.retries as f64);
                    self.rotations.push(c.rotations as f64);
                    self.backoff.push(c.backoff_ms as f64);
                    if let Some(r) = round.ready {
                        self.added.push(Round::ms(r.sent, c.end));
                    }
                }
                Some(e) => self.failed.push(e.clone()),
            }
        }
        self.missing += expected.saturating_sub(calls.len());
    }

    /// `retries / rotations / backoff ms` medians of the successful calls.
    fn effort(&self) -> String {
        let m = |v: &[f64]| Summary::of(v).map_or("-".into(), |s| num(s.p50));
        format!(
            "per successful call (median): {} retries, {} rotations, {} ms in backoff/waitPrimary",
            m(&self.retries),
            m(&self.rotations),
            m(&self.backoff)
        )
    }

    /// The verdict of `value ≤ limit`, NOT MET whenever a call failed or hung.
    fn verdict_le(&self, value: f64, limit: f64, unit: &str) -> Verdict {
        match self.problems() {
            None => verdict_le(value, limit, unit),
            Some(p) => Verdict::NotMet(format!(
                "{}{unit} over the calls that succeeded, but {p}",
                num(value)
            )),
        }
    }

    fn problems(&self) -> Option<String> {
        if self.failed.is_empty() && self.missing == 0 {
            return None;
        }
        Some(format!(
            "{} call(s) failed, {} still blocked after the round's bound{}",
            self.failed.len(),
            self.missing,
            self.failed
                .first()
                .map_or(String::new(), |e| format!("; first error: {e}"))
        ))
    }
}

/// The max number of instants within any window of length `w` (sliding), and where it starts.
fn max_in_window(times: &mut [Instant], w: Duration) -> (usize, Option<Instant>) {
    times.sort();
    let (mut best, mut at, mut lo) = (0, None, 0);
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        if hi - lo + 1 > best {
            best = hi - lo + 1;
            at = Some(times[lo]);
        }
    }
    (best, at)
}

fn verdict_le(value: f64, limit: f64, unit: &str) -> Verdict {
    Verdict::from(
        value <= limit,
        if value <= limit {
            format!("{}{unit}, {} {unit} under", num(value), num(limit - value))
        } else {
            format!("{}{unit}, {} {unit} over", num(value), num(value - limit))
        },
    )
}

/// All failover benchmarks the options select; tables in P3, P4, P5, P6 order.
pub fn run(opts: &BenchOpts) -> Result<Vec<Table>, String> {
    let want_one = opts.wants("P3") || opts.wants("P4") || opts.wants("P5");
    let want_crowd = opts.wants("P3");
    let want_herd = opts.wants("P6");
    let mut cluster =
        Cluster::start(3, opts.cluster_opts()).map_err(|e| format!("start cluster: {e}"))?;
    cluster
        .wait_primary(Duration::from_secs(20))
        .ok_or("no primary elected within 20 s")?;
    let masters = cluster.masters();
    let mut tables = Vec::new();
    let mut errors = Vec::new();

    // 1 client of each policy per kill, side by side.
    let kills = opts.kills.unwrap_or(opts.pick(5, 2 * P4_MIN_KILLS));
    let (mut ours, mut base) = (Group::default(), Group::default());
    let (mut election, mut reap) = (Vec::new(), Vec::new());
    let mut rounds_done = 0;
    if want_one {
        let rig_ours = Rig::new(1, Policy::Ours, &masters, false)?;
        let rig_base = Rig::new(1, Policy::Baseline, &masters, false)?;
        for k in 0..kills {
            match kill_round(&mut cluster, &[&rig_ours, &rig_base]) {
                Ok(r) => {
                    ours.add(&r, &r.calls[0], 1);
                    base.add(&r, &r.calls[1], 1);
                    if let Some(rd) = r.ready {
                        election.push(Round::ms(r.t_kill, rd.sent));
                    }
                    reap.push(Round::ms(r.t_kill, r.t_dead));
                    rounds_done += 1;
                    let show = |c: &[CallRecord]| match c.first() {
                        Some(CallRecord {
                            error: None, end, ..
                        }) => format!("{} ms", num(Round::ms(r.t_kill, *end))),
                        Some(CallRecord {
                            error: Some(_),
                            end,
                            ..
                        }) => format!("FAILED at {} ms", num(Round::ms(r.t_kill, *end))),
                        None => "still blocked".into(),
                    };
                    eprintln!(
                        "  kill {}/{kills}: node {} killed; ready after {} ms; first success ours {}, baseline {} after the kill",
                        k + 1,
                        r.killed,
                        r.ready.map_or("?".into(), |rd| num(Round::ms(r.t_kill, rd.sent))),
                        show(&r.calls[0]),
                        show(&r.calls[1]),
                    );
                }
                Err(e) => {
                    errors.push(format!("kill {}: {e}", k + 1));
                    break;
                }
            }
        }
    }

    // 200 clients sharing a failover.
    let crowd_kills = opts.pick(1, 5);
    let mut crowd = Group::default();
    if want_crowd && errors.is_empty() {
        let rig = Rig::new(CROWD, Policy::Ours, &masters, false)?;
        for k in 0..crowd_kills {
            match kill_round(&mut cluster, &[&rig]) {
                Ok(r) => {
                    crowd.add(&r, &r.calls[0], CROWD);
                    eprintln!("  {CROWD}-client kill {}/{crowd_kills} done", k + 1);
                }
                Err(e) => {
                    errors.push(format!("{CROWD}-client kill {}: {e}", k + 1));
                    break;
                }
            }
        }
    }

    // 1000 contexts: the herd.
    let herd_kills = opts.pick(1, 3);
    let mut herd_rows = Vec::new();
    let mut herd_worst_share = 0.0f64;
    let mut herd_worst_after = 0.0f64;
    let mut herd = Group::default();
    if want_herd && errors.is_empty() {
        let rig = Rig::new(HERD, Policy::Ours, &masters, true)?;
        for k in 0..herd_kills {
            match kill_round(&mut cluster, &[&rig]) {
                Ok(r) => {
                    herd.add(&r, &r.calls[0], HERD);
                    let log = rig
                        .rotations
                        .as_ref()
                        .expect("recorded")
                        .lock()
                        .expect("log")
                        .clone();
                    let port = r.new_primary_port;
                    let mut connects: Vec<Instant> = log
                        .iter()
                        .filter(|&&(_, from, to)| Some(to) == port && from != to)
                        .map(|&(t, _, _)| t)
                        .collect();
                    let n_connects = connects.len();
                    let (max_c, at) = max_in_window(&mut connects, HERD_WINDOW);
                    let mut after_ready: Vec<Instant> = match r.ready {
                        Some(rd) => connects.iter().copied().filter(|&t| t >= rd.sent).collect(),
                        None => Vec::new(),
                    };
                    let n_after = after_ready.len();
                    let (max_after, at_after) = max_in_window(&mut after_ready, HERD_WINDOW);
                    herd_worst_after = herd_worst_after.max(max_after as f64 / HERD as f64);
                    let mut firsts: Vec<Instant> = r.calls[0]
                        .iter()
                        .filter(|c| c.error.is_none())
                        .map(|c| c.end)
                        .collect();
                    let (max_s, _) = max_in_window(&mut firsts, HERD_WINDOW);
                    let ok = r.calls[0].iter().filter(|c| c.error.is_none()).count();
                    let share = max_c as f64 / HERD as f64;
                    herd_worst_share = herd_worst_share.max(share);
                    let rel = |t: Option<Instant>| match (t, r.ready) {
                        (Some(t), Some(rd)) => format!("{} ms", num(Round::ms(rd.sent, t))),
                        _ => "-".into(),
                    };
                    herd_rows.push(vec![
                        format!("kill {}", k + 1),
                        format!("{ok}/{HERD}"),
                        format!("{n_connects} / {n_after}"),
                        format!("{max_c} ({:.1}%) at {}", share * 100.0, rel(at)),
                        format!(
                            "{max_after} ({:.1}%) at {}",
                            max_after as f64 / HERD as f64 * 100.0,
                            rel(at_after)
                        ),
                        format!("{max_s} ({:.1}%)", max_s as f64 / HERD as f64 * 100.0),
                        r.calls[0]
                            .iter()
                            .filter(|c| c.error.is_none())
                            .map(|c| c.end)
                            .max()
                            .map_or("-".into(), |t| rel(Some(t))),
                    ]);
                    eprintln!("  {HERD}-context kill {}/{herd_kills} done", k + 1);
                }
                Err(e) => {
                    errors.push(format!("{HERD}-context kill {}: {e}", k + 1));
                    break;
                }
            }
        }
    }

    let quick_note = |n: usize, full: usize| {
        if n < full {
            format!(
                " — only {n} kill(s) measured{}",
                if opts.quick { " (quick mode)" } else { "" }
            )
        } else {
            String::new()
        }
    };
    let method = format!(
        "method: 3 controllers (default timing); per kill, each client first makes one call (connected, idle), \
         then the primary is killed (-9, reaped) and every client is released into one hello; \
         ready = send time of the first hello a surviving node served (raw probe every {} ms per node)",
        PROBE_INTERVAL.as_millis()
    );

    if opts.wants("P3") {
        let mut t = Table::new(
            "P3",
            "client-added failover latency: first success − new primary ready",
        );
        t.note(method.clone());
        t.note(format!(
            "1 client: {} kill(s){}, a baseline client failing over beside it (P5); {CROWD} clients: {} kill(s), \
         one context per thread; negative = served within the probe resolution",
            rounds_done,
            quick_note(rounds_done, P4_MIN_KILLS),
            crowd_kills
        ));
        t.dist_header("clients", "ms");
        let s1 = Summary::of(&ours.added);
        let s200 = Summary::of(&crowd.added);
        t.dist_row("1 client (ours)", s1);
        t.dist_row(format!("{CROWD} clients (ours), all calls"), s200);
        for (name, g) in [("1 client", &ours), ("200 clients", &crowd)] {
            if let Some(p) = g.problems() {
                t.result(format!("{name}: {p}"));
            }
        }
        t.result(format!("1 client: {}", ours.effort()));
        t.result(format!("{CROWD} clients: {}", crowd.effort()));
        let no_success = |g: &Group| match g.problems() {
            Some(p) => Verdict::NotMet(format!("no call succeeded: {p}")),
            None => Verdict::NotMeasured("no kill measured".into()),
        };
        match s1 {
            Some(s) => {
                t.target("p50 ≤ 5 ms (1 client)", ours.verdict_le(s.p50, 5.0, " ms"));
                t.target(
                    format!(
                        "p99 ≤ 50 ms (1 client){}",
                        if s.n < 100 {
                            " [p99 of fewer than 100 samples = max]"
                        } else {
                            ""
                        }
                    ),
                    ours.verdict_le(s.p99, 50.0, " ms"),
                );
            }
            None => t.target("p50 ≤ 5 ms, p99 ≤ 50 ms (1 client)", no_success(&ours)),
        }
        match s200 {
            Some(s) => t.target(
                format!("p99 ≤ 250 ms ({CROWD} clients)"),
                crowd.verdict_le(s.p99, 250.0, " ms"),
            ),
            None => t.target(
                format!("p99 ≤ 250 ms ({CROWD} clients)"),
                no_success(&crowd),
            ),
        }
        tables.push(t);
    }

    if opts.wants("P4") {
        // The same kills against the timing before C15, on a cluster of its own.
        let before = one_client_series(opts, &BEFORE_C15, kills);
        let mut t = Table::new(
            "P4",
            "total unavailability: kill -9 of the primary → first success",
        );
        t.note(method.clone());
        t.note(format!(
            "side by side in one run: the controller's defaults (C15: see its --help) and, on a second cluster, \
             the timing before C15 ({})",
            BEFORE_C15.join(" ")
        ));
        t.dist_header("timing / interval", "ms");
        t.dist_row(
            "defaults: kill → first success (1 client)",
            Summary::of(&ours.total),
        );
        t.dist_row(
            "  of which kill → new primary ready (the cluster's election)",
            Summary::of(&election),
        );
        t.dist_row(
            "  of which kill → killed process reaped",
            Summary::of(&reap),
        );
        t.dist_row(
            "before C15: kill → first success (1 client)",
            Summary::of(&before.ours.total),
        );
        t.dist_row(
            "  of which kill → new primary ready",
            Summary::of(&before.election),
        );
        if let Some(p) = ours.problems() {
            t.result(format!("defaults: {p}"));
        }
        if let Some(p) = before.ours.problems() {
            t.result(format!("before C15: {p}"));
        }
        if let Some(e) = &before.error {
            t.result(format!("before C15: series aborted: {e}"));
        }
        t.note(format!(
            "defaults: {rounds_done} kill(s), {} successful first calls; before C15: {} kill(s), {} successful first calls",
            ours.total.len(),
            before.rounds,
            before.ours.total.len()
        ));
        let note = quick_note(rounds_done, P4_MIN_KILLS);
        match Summary::of(&ours.total) {
            Some(s) => {
                t.target(
                    format!("median ≤ {P4_P50_MS} ms over ≥ {P4_MIN_KILLS} kills{note}"),
                    ours.verdict_le(s.p50, P4_P50_MS, " ms"),
                );
                t.target(
                    format!(
                        "p99 ≤ {P4_P99_MS} ms{}{note}",
                        if s.n < 100 {
                            " [p99 of fewer than 100 samples = max]"
                        } else {
                            ""
                        }
                    ),
                    ours.verdict_le(s.p99, P4_P99_MS, " ms"),
                );
            }
            None => t.target(
                format!("median ≤ {P4_P50_MS} ms, p99 ≤ {P4_P99_MS} ms{note}"),
                match ours.problems() {
                    Some(p) => Verdict::NotMet(format!("no call succeeded: {p}")),
                    None => Verdict::NotMeasured("no kill measured".into()),
                },
            ),
        }
        tables.push(t);
    }

    if opts.wants("P5") {
        let mut t = Table::new(
            "P5",
            "baseline policy in the same run (same kills, side by side)",
        );
        t.note(
            "baseline = XCE_RETRY_DEFAULTS (50 ms × 2 up to 5 s, 20 sleeps) with waitPrimary off, through the same loop: \
             it still rotates through all masters without sleeping on refused/redirect and jitters its sleeps, which \
             the seeds' single-endpoint primitive did not (that one could not leave a killed primary at all)",
        );
        t.note(format!(
            "{rounds_done} kill(s); one client of each policy released together at each kill"
        ));
        t.dist_header("policy / interval", "ms");
        t.dist_row("ours: first success − ready", Summary::of(&ours.added));
        t.dist_row("baseline: first success − ready", Summary::of(&base.added));
        t.dist_row("ours: kill → first success", Summary::of(&ours.total));
        t.dist_row("baseline: kill → first success", Summary::of(&base.total));
        for (name, g) in [("ours", &ours), ("baseline", &base)] {
            t.result(format!("{name}: {}", g.effort()));
            if let Some(p) = g.problems() {
                t.result(format!("{name}: {p}"));
            }
        }
        let floor = PROBE_INTERVAL.as_secs_f64() * 1e3;
        match (Summary::of(&ours.added), Summary::of(&base.added)) {
            (Some(o), Some(b)) => {
                let r50 = b.p50 / o.p50.max(floor);
                let r90 = b.p90 / o.p90.max(floor);
                t.result(format!(
                    "ratio baseline / ours of the client-added latency: p50 {r50:.1}×, p90 {r90:.1}× \
                     (ours floored at the {floor} ms probe resolution, which can only lower the ratio)"
                ));
                let what = "ours ≥ 10× better (p50 of first success − ready)";
                match ours.problems() {
                    None => t.target(what, Verdict::from(r50 >= 10.0, format!("{r50:.1}×"))),
                    Some(p) => t.target(
                        what,
                        Verdict::NotMet(format!(
                            "{r50:.1}× over the calls that succeeded, but ours: {p}"
                        )),
                    ),
                }
            }
            (None, _) if ours.problems().is_some() => t.target(
                "ours ≥ 10× better",
                Verdict::NotMet(format!(
                    "ours never succeeded: {}",
                    ours.problems().unwrap_or_default()
                )),
            ),
            _ => t.target(
                "ours ≥ 10× better",
                Verdict::NotMeasured("no kill measured".into()),
            ),
        }
        tables.push(t);
    }

    if opts.wants("P6") {
        let mut t = Table::new("P6", "herd: 1000 contexts fail over together");
        t.note(format!(
            "{HERD} contexts (default policy), one thread each, all connected to the primary, released together into \
             one hello right after the kill; {} kill(s)",
            herd_rows.len()
        ));
        t.note(method.clone());
        t.note(
            "connect attempts counted on the client side: every F17 Rotation event whose target is the new primary \
             (the loop connects right after rotating; a context already connected to that node when it is elected \
             re-sends on its connection and needs no connect); windows are sliding 10 ms windows; the verdict counts \
             every connect to the node that becomes primary from the kill on (stricter than after-ready only)",
        );
        t.header = [
            "kill",
            "succeeded",
            "connects to the new primary: from kill / after ready",
            "max in 10 ms, from kill (window start − ready)",
            "max in 10 ms, after ready",
            "max first successes in 10 ms",
            "last success (after ready)",
        ]
        .map(String::from)
        .to_vec();
        for r in &herd_rows {
            t.row(r.clone());
        }
        if let Some(s) = Summary::of(&herd.added) {
            t.result(format!(
                "first success − ready over all contexts: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
                num(s.p50),
                num(s.p90),
                num(s.p99),
                num(s.max)
            ));
        }
        if let Some(p) = herd.problems() {
            t.result(p);
        }
        if herd_rows.is_empty() {
            t.target(
                "no 10 ms window above 20%; all succeed",
                Verdict::NotMeasured("no kill measured".into()),
            );
        } else {
            t.target(
                "no 10 ms window above 20% of the contexts (connects from the kill on)",
                Verdict::from(
                    herd_worst_share <= HERD_MAX_SHARE,
                    format!(
                        "worst window {:.1}%{}",
                        herd_worst_share * 100.0,
                        if herd_worst_share > HERD_MAX_SHARE {
                            format!(
                                ", {:.1} points over",
                                (herd_worst_share - HERD_MAX_SHARE) * 100.0
                            )
                        } else {
                            String::new()
                        }
                    ),
                ),
            );
            t.target(
                "the same, counting only connects after the new primary was ready (the looser reading)",
                Verdict::from(
                    herd_worst_after <= HERD_MAX_SHARE,
                    format!("worst window {:.1}%", herd_worst_after * 100.0),
                ),
            );
            t.target(
                "all succeed",
                Verdict::from(
                    herd.problems().is_none(),
                    herd.problems()
                        .unwrap_or_else(|| format!("{} calls", herd.total.len())),
                ),
            );
        }
        tables.push(t);
    }

    if let Some(path) = &opts.svg {
        if errors.is_empty() {
            match timeline_round(&mut cluster, 3, Duration::from_millis(10)) {
                Ok(tl) => match super::svg::write_timeline(path, &tl) {
                    Ok(()) => eprintln!("  wrote {}", path.display()),
                    Err(e) => errors.push(format!("svg: {e}")),
                },
                Err(e) => errors.push(format!("svg round: {e}")),
            }
        }
    }

    if !errors.is_empty() {
        for t in &mut tables {
            t.result(format!("run aborted early: {}", errors.join("; ")));
        }
        if tables.is_empty() {
            return Err(errors.join("; "));
        }
    }
    Ok(tables)
}
