//! The kill series P3, P4, P5 and P6 are read from: [`measure`] runs the kill rounds of
//! [`super::failover`] on one cluster — one client of each policy per kill, then
//! [`CROWD`] clients, then [`HERD`] contexts, then (`--svg`) one drawn failover — and returns
//! what they measured ([`Kills`]); each benchmark's module turns it into its table.

use std::time::{Duration, Instant};

use super::failover::{kill_round, timeline_round, CallRecord, Policy, Rig, Round, PROBE_INTERVAL};
use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};
use crate::Cluster;

/// Client counts of the acceptance table.
pub const CROWD: usize = 200;
pub const HERD: usize = 1000;
/// P4 wants a median over at least this many kills (and P3 says when it has fewer).
pub const P4_MIN_KILLS: usize = 20;

/// The outcome of one group of calls over the rounds, relative to each round's marks.
#[derive(Default)]
pub struct Group {
    /// first success − ready, ms (rounds where the prober saw the new primary).
    pub added: Vec<f64>,
    /// Per successful call: retries, rotations, ms in backoff/waitPrimary.
    pub retries: Vec<f64>,
    pub rotations: Vec<f64>,
    pub backoff: Vec<f64>,
    /// first success − kill, ms.
    pub total: Vec<f64>,
    pub failed: Vec<String>,
    pub missing: usize,
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
    pub fn effort(&self) -> String {
        let m = |v: &[f64]| Summary::of(v).map_or("-".into(), |s| num(s.p50));
        format!(
            "per successful call (median): {} retries, {} rotations, {} ms in backoff/waitPrimary",
            m(&self.retries),
            m(&self.rotations),
            m(&self.backoff)
        )
    }

    /// The verdict of `value ≤ limit`, NOT MET whenever a call failed or hung.
    pub fn verdict_le(&self, value: f64, limit: f64, unit: &str) -> Verdict {
        match self.problems() {
            None => verdict_le(value, limit, unit),
            Some(p) => Verdict::NotMet(format!(
                "{}{unit} over the calls that succeeded, but {p}",
                num(value)
            )),
        }
    }

    /// The verdict when no call succeeded: NOT MET if one failed or hung, else NOT MEASURED.
    pub fn no_success(&self) -> Verdict {
        match self.problems() {
            Some(p) => Verdict::NotMet(format!("no call succeeded: {p}")),
            None => Verdict::NotMeasured("no kill measured".into()),
        }
    }

    pub fn problems(&self) -> Option<String> {
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

/// One kill of the herd: the round, and the rotations its contexts logged (F17 events).
pub struct HerdRound {
    pub round: Round,
    pub rotations: Vec<(Instant, u16, u16)>,
}

/// Everything the kill series measured.
#[derive(Default)]
pub struct Kills {
    /// Kills of the one-client series asked for, and done.
    pub kills: usize,
    pub rounds_done: usize,
    /// One client of each policy, released together at each kill.
    pub ours: Group,
    pub base: Group,
    /// kill → new primary ready, and kill → killed process reaped, ms.
    pub election: Vec<f64>,
    pub reap: Vec<f64>,
    /// [`CROWD`] clients of the default policy.
    pub crowd: Group,
    pub crowd_kills: usize,
    /// [`HERD`] contexts of the default policy.
    pub herd: Group,
    pub herd_rounds: Vec<HerdRound>,
    /// Why a series stopped early (the tables say so).
    pub errors: Vec<String>,
    pub quick: bool,
}

impl Kills {
    /// " — only N kill(s) measured (quick mode)" when `n` is below `full`.
    pub fn quick_note(&self, n: usize, full: usize) -> String {
        if n < full {
            format!(
                " — only {n} kill(s) measured{}",
                if self.quick { " (quick mode)" } else { "" }
            )
        } else {
            String::new()
        }
    }

    /// The method note P3, P4 and P6 print.
    pub fn method(&self) -> String {
        format!(
            "method: 3 controllers (default timing); per kill, each client first makes one call (connected, idle), \
             then the primary is killed (-9, reaped) and every client is released into one hello; \
             ready = send time of the first hello a surviving node served (raw probe every {} ms per node)",
            PROBE_INTERVAL.as_millis()
        )
    }

    /// Every table says when a series stopped early; with no table, the error is the result.
    pub fn finish(&self, mut tables: Vec<Table>) -> Result<Vec<Table>, String> {
        if self.errors.is_empty() {
            return Ok(tables);
        }
        for t in &mut tables {
            t.result(format!("run aborted early: {}", self.errors.join("; ")));
        }
        if tables.is_empty() {
            return Err(self.errors.join("; "));
        }
        Ok(tables)
    }
}

/// Runs the kill series the options select (see the module's doc).
pub fn measure(opts: &BenchOpts) -> Result<Kills, String> {
    let (mut cluster, _) = opts.start_cluster()?;
    let masters = cluster.masters();
    let mut k = Kills {
        kills: opts.kills.unwrap_or(opts.pick(5, 2 * P4_MIN_KILLS)),
        crowd_kills: opts.pick(1, 5),
        quick: opts.quick,
        ..Kills::default()
    };
    if opts.wants("P3") || opts.wants("P4") || opts.wants("P5") {
        one_client_rounds(&mut cluster, &masters, &mut k)?;
    }
    if opts.wants("P3") && k.errors.is_empty() {
        crowd_rounds(&mut cluster, &masters, &mut k)?;
    }
    if opts.wants("P6") && k.errors.is_empty() {
        herd_rounds(&mut cluster, &masters, opts.pick(1, 3), &mut k)?;
    }
    if let Some(path) = &opts.svg {
        if k.errors.is_empty() {
            draw_one_failover(&mut cluster, path, &mut k.errors);
        }
    }
    Ok(k)
}

/// 1 client of each policy per kill, side by side.
fn one_client_rounds(cluster: &mut Cluster, masters: &str, k: &mut Kills) -> Result<(), String> {
    let rig_ours = Rig::new(1, Policy::Ours, masters, false)?;
    let rig_base = Rig::new(1, Policy::Baseline, masters, false)?;
    let kills = k.kills;
    for n in 0..kills {
        let r = match kill_round(cluster, &[&rig_ours, &rig_base]) {
            Ok(r) => r,
            Err(e) => {
                k.errors.push(format!("kill {}: {e}", n + 1));
                break;
            }
        };
        k.ours.add(&r, &r.calls[0], 1);
        k.base.add(&r, &r.calls[1], 1);
        if let Some(rd) = r.ready {
            k.election.push(Round::ms(r.t_kill, rd.sent));
        }
        k.reap.push(Round::ms(r.t_kill, r.t_dead));
        k.rounds_done += 1;
        eprintln!(
            "  kill {}/{kills}: node {} killed; ready after {} ms; first success ours {}, baseline {} after the kill",
            n + 1,
            r.killed,
            r.ready.map_or("?".into(), |rd| num(Round::ms(r.t_kill, rd.sent))),
            first_success(&r, &r.calls[0]),
            first_success(&r, &r.calls[1]),
        );
    }
    Ok(())
}

/// How a client's one call of round `r` ended, for the progress line.
fn first_success(r: &Round, calls: &[CallRecord]) -> String {
    match calls.first() {
        Some(CallRecord {
            error: None, end, ..
        }) => format!("{} ms", num(Round::ms(r.t_kill, *end))),
        Some(CallRecord {
            error: Some(_),
            end,
            ..
        }) => format!("FAILED at {} ms", num(Round::ms(r.t_kill, *end))),
        None => "still blocked".into(),
    }
}

/// [`CROWD`] clients sharing a failover.
fn crowd_rounds(cluster: &mut Cluster, masters: &str, k: &mut Kills) -> Result<(), String> {
    let rig = Rig::new(CROWD, Policy::Ours, masters, false)?;
    let crowd_kills = k.crowd_kills;
    for n in 0..crowd_kills {
        match kill_round(cluster, &[&rig]) {
            Ok(r) => {
                k.crowd.add(&r, &r.calls[0], CROWD);
                eprintln!("  {CROWD}-client kill {}/{crowd_kills} done", n + 1);
            }
            Err(e) => {
                k.errors.push(format!("{CROWD}-client kill {}: {e}", n + 1));
                break;
            }
        }
    }
    Ok(())
}

/// [`HERD`] contexts failing over together, their rotations recorded.
fn herd_rounds(
    cluster: &mut Cluster,
    masters: &str,
    herd_kills: usize,
    k: &mut Kills,
) -> Result<(), String> {
    let rig = Rig::new(HERD, Policy::Ours, masters, true)?;
    for n in 0..herd_kills {
        match kill_round(cluster, &[&rig]) {
            Ok(round) => {
                k.herd.add(&round, &round.calls[0], HERD);
                let rotations = rig
                    .rotations
                    .as_ref()
                    .expect("recorded")
                    .lock()
                    .expect("log")
                    .clone();
                k.herd_rounds.push(HerdRound { round, rotations });
                eprintln!("  {HERD}-context kill {}/{herd_kills} done", n + 1);
            }
            Err(e) => {
                k.errors.push(format!("{HERD}-context kill {}: {e}", n + 1));
                break;
            }
        }
    }
    Ok(())
}

/// P16's kills on quiet links: what one series of them measured.
#[derive(Debug, Clone, Default)]
pub struct Quiet {
    /// Per kill: its first successful call, ms after the kill.
    pub first_success_ms: Vec<f64>,
    /// Calls that failed or stayed blocked past the round's bound.
    pub failed: usize,
    /// Why the series stopped early, if it did.
    pub error: Option<String>,
}

impl Quiet {
    /// P16: `kills` kills of the primary of a fresh 3-node cluster of the controller
    /// `XCE_CONTROLLER` names, with its own timing on quiet (loopback) links, one client of
    /// ours released at each — P4's measurement, for a run that also measures the same build on
    /// congested links (`xce-congestion --p16`); the logs under `logs`.
    pub fn measure(kills: usize, logs: &std::path::Path) -> Quiet {
        let opts = BenchOpts {
            log_dir: Some(logs.to_path_buf()),
            ..BenchOpts::default()
        };
        let mut ours = Group::default();
        let error = one_client_series(&opts, kills, &mut ours).err();
        Quiet {
            first_success_ms: ours.total,
            failed: ours.failed.len() + ours.missing,
            error,
        }
    }
}

/// `kills` kills of the primary of a fresh 3-node cluster, one client of ours released at
/// each, its calls added to `ours`; why the series stopped early, if it did.
fn one_client_series(opts: &BenchOpts, kills: usize, ours: &mut Group) -> Result<(), String> {
    let (mut cluster, _) = opts.start_cluster()?;
    let rig = Rig::new(1, Policy::Ours, &cluster.masters(), false)?;
    for n in 0..kills {
        let r = kill_round(&mut cluster, &[&rig]).map_err(|e| format!("kill {}: {e}", n + 1))?;
        ours.add(&r, &r.calls[0], 1);
        eprintln!(
            "  kill {}/{kills}: ready after {} ms, first success {} ms after the kill",
            n + 1,
            r.ready
                .map_or("?".into(), |rd| num(Round::ms(r.t_kill, rd.sent))),
            r.calls[0]
                .first()
                .map_or("-".into(), |c| num(Round::ms(r.t_kill, c.end)))
        );
    }
    Ok(())
}

/// `--svg`: one more failover, 3 clients of each policy calling every 10 ms, drawn to `path`.
fn draw_one_failover(cluster: &mut Cluster, path: &std::path::Path, errors: &mut Vec<String>) {
    match timeline_round(cluster, 3, Duration::from_millis(10)) {
        Ok(tl) => match super::svg::write_timeline(path, &tl) {
            Ok(()) => eprintln!("  wrote {}", path.display()),
            Err(e) => errors.push(format!("svg: {e}")),
        },
        Err(e) => errors.push(format!("svg round: {e}")),
    }
}
