//! P12 (amended in the fifth round): the job table at scale — memory and disk per stored job at
//! 10^4–10^7 jobs, what happened while it was loaded (snapshots, the writes' p99 during one and
//! outside, step-downs and elections without a fault), a listing of everything through the C
//! API, a restart on the node's data, a catch-up from an empty data directory, a failover; the
//! log store against the snapshot when writes come one at a time. Run by `xce-scale`
//! ([`super::suite::scale`]); P17 reads its rows ([`super::p17_growth`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::table::{Table, Verdict};
use super::{load, nodelog, ScaleOpts, Summary};
use crate::harness::cluster::probe;
use crate::Cluster;

/// Time until node `id` answers a raw hello (any role).
fn wait_answers(c: &Cluster, id: u32, timeout: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if probe(c.node(id).client, Duration::from_millis(200)).is_ok() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Time until node `id`'s log has `what` more times than `before`.
fn wait_log(
    logs: &Path,
    id: u32,
    what: &str,
    before: usize,
    timeout: Duration,
) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if count_log(logs, id, what) > before {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn count_log(logs: &Path, id: u32, what: &str) -> usize {
    std::fs::read_to_string(logs.join(format!("node-{id}.log")))
        .unwrap_or_default()
        .matches(what)
        .count()
}

pub(crate) fn ms(d: Option<Duration>) -> String {
    d.map_or("—".into(), |d| format!("{:.0}", d.as_secs_f64() * 1000.0))
}

/// How long after a snapshot ends a write still counts as during it: what follows a snapshot
/// on the node that wrote it (the log purged behind it, its file's last blocks on the disk).
pub const AFTER_SNAPSHOT_MS: i64 = 1000;

/// Everything one P12 row measured: a fresh cluster of one controller build loaded with `jobs`
/// jobs by 64 contexts.
#[derive(Debug, Clone)]
pub struct Row {
    pub controller: String,
    pub jobs: u64,
    /// Jobs per second of the load.
    pub load_rate: f64,
    /// Per node (by id): RSS per job, whether it was the primary, disk per job, what its data
    /// directory holds.
    pub rss: Vec<(f64, bool)>,
    pub disk: Vec<f64>,
    pub split: Vec<load::Split>,
    pub during: During,
    /// `joblist` of everything: its time, or why not.
    pub joblist: Result<Duration, String>,
    pub restart: Option<Duration>,
    pub catch_up: Option<Duration>,
    /// Whether the blank node installed a snapshot to catch up (or caught up from the log).
    pub caught_up_by_snapshot: bool,
    pub failover: Option<Duration>,
}

/// What happened while the table was loaded (and the 3 s after), read from the nodes' logs
/// and the writes' own times.
#[derive(Debug, Clone, Default)]
pub struct During {
    /// Snapshots written (on every node), installed, and the longest to write (ms).
    pub built: usize,
    pub installed: usize,
    pub longest_ms: i64,
    /// Writes' latencies (ms): in flight during a snapshot of any node (or within
    /// [`AFTER_SNAPSHOT_MS`] of its end), and the others.
    pub in_snapshot: Option<Summary>,
    pub outside: Option<Summary>,
    /// C10: a primary that stopped serving ("no answer from a quorum"); campaigns started.
    pub step_downs: usize,
    pub elections: usize,
}

impl During {
    /// Reads the nodes' logs between `from_ms` and `to_ms` and sorts the writes.
    fn read(logs: &Path, ids: &[u32], writes: &[load::Timed], from_ms: i64, to_ms: i64) -> During {
        let spans: Vec<_> = ids
            .iter()
            .flat_map(|&id| nodelog::snapshots(logs, id, from_ms, to_ms))
            .collect();
        let (mut inside, mut outside) = (Vec::new(), Vec::new());
        for w in writes {
            let (a, b) = w.span_ms();
            let v = f64::from(w.took_us) / 1000.0;
            if nodelog::meets_any(&spans, a, b, AFTER_SNAPSHOT_MS) {
                inside.push(v);
            } else {
                outside.push(v);
            }
        }
        let count = |what: &str| {
            ids.iter()
                .map(|&id| nodelog::count_between(logs, id, what, from_ms, to_ms))
                .sum()
        };
        During {
            built: spans.iter().filter(|s| s.built).count(),
            installed: spans.iter().filter(|s| !s.built).count(),
            longest_ms: spans
                .iter()
                .map(|s| s.end_ms - s.start_ms)
                .max()
                .unwrap_or(0),
            in_snapshot: Summary::of(&inside),
            outside: Summary::of(&outside),
            step_downs: count("not serving as primary"),
            elections: count("role=candidate"),
        }
    }
}

/// One row of P12: a fresh cluster of `bin` loaded with `n` jobs; what happened during the
/// load, what each node holds, a listing of everything, a standby restarted on its data, a
/// standby caught up from an empty directory, a failover.
pub fn p12_row(name: &str, bin: &Path, n: u64, logs: &Path) -> Result<Row, String> {
    let mut c = load::cluster_of(bin, logs)?;
    let m = c.masters();
    let from_ms = load::wall_ms();
    let loaded = load::load_jobs_timed(&m, n, 64)?;
    // Let snapshots and purges settle (and count what they did).
    std::thread::sleep(Duration::from_secs(3));
    let during = During::read(logs, &[1, 2, 3], &loaded.writes, from_ms, load::wall_ms());
    let p = c.wait_primary(Duration::from_secs(5)).ok_or("no primary")?;
    let mut row = Row {
        controller: name.into(),
        jobs: n,
        load_rate: n as f64 / loaded.took.as_secs_f64(),
        rss: Vec::new(),
        disk: Vec::new(),
        split: Vec::new(),
        during,
        joblist: Err(String::new()),
        restart: None,
        catch_up: None,
        caught_up_by_snapshot: false,
        failover: None,
    };
    drop(loaded);
    row.held(&c, p);
    row.joblist = listing(&m, n);
    row.restart = restart_standby(&mut c, p)?;
    (row.catch_up, row.caught_up_by_snapshot) = catch_up_standby(&mut c, p, logs)?;
    row.failover = fail_over(&mut c)?;
    Ok(row)
}

impl Row {
    /// What each node holds per stored job: RSS (and whether it is the primary), disk.
    fn held(&mut self, c: &Cluster, p: u32) {
        let n = self.jobs as f64;
        for node in &c.nodes {
            let rss = node.pid().and_then(load::rss_bytes).unwrap_or(0) as f64 / n;
            let dir = load::node_dir(c, node.id);
            self.rss.push((rss, node.id == p));
            self.disk.push(load::disk_bytes(&dir) as f64 / n);
            self.split.push(load::split(&dir));
        }
    }

    pub fn worst_rss(&self) -> f64 {
        self.rss.iter().map(|r| r.0).fold(0.0, f64::max)
    }

    pub fn worst_disk(&self) -> f64 {
        self.disk.iter().copied().fold(0.0, f64::max)
    }

    pub fn joblist_ms(&self) -> Option<f64> {
        self.joblist.as_ref().ok().map(|d| d.as_secs_f64() * 1000.0)
    }

    fn cells(&self) -> Vec<String> {
        let rss: Vec<String> = self
            .rss
            .iter()
            .map(|(r, p)| format!("{}{r:.0}", if *p { "P " } else { "" }))
            .collect();
        let disk: Vec<String> = self.disk.iter().map(|d| format!("{d:.0}")).collect();
        let ratio: Vec<String> = self.split.iter().map(ratio_cell).collect();
        vec![
            self.controller.clone(),
            self.jobs.to_string(),
            format!("{:.0}/s", self.load_rate),
            rss.join(" / "),
            disk.join(" / "),
            ratio.join(" / "),
            match &self.joblist {
                Ok(d) => format!("{:.0} ms", d.as_secs_f64() * 1000.0),
                Err(e) => e.clone(),
            },
            ms(self.restart),
            format!(
                "{} ({})",
                ms(self.catch_up),
                if self.caught_up_by_snapshot {
                    "snapshot"
                } else {
                    "log"
                }
            ),
            ms(self.failover),
        ]
    }

    fn during_cells(&self) -> Vec<String> {
        let d = &self.during;
        let p99 = |s: &Option<Summary>| s.map_or("—".into(), |s| format!("{:.1}", s.p99));
        let n = |s: &Option<Summary>| s.map_or(0, |s| s.n);
        vec![
            self.controller.clone(),
            self.jobs.to_string(),
            format!("{} / {}", d.built, d.installed),
            d.longest_ms.to_string(),
            format!("{} / {}", n(&d.in_snapshot), n(&d.outside)),
            p99(&d.in_snapshot),
            p99(&d.outside),
            d.step_downs.to_string(),
            d.elections.to_string(),
        ]
    }
}

/// The log store against the snapshot on one node: `log store / snapshot` in MB and their
/// ratio.
fn ratio_cell(s: &load::Split) -> String {
    format!(
        "{:.1}/{:.1} ({})",
        s.log_store as f64 / 1e6,
        s.snapshot as f64 / 1e6,
        ratio(s)
    )
}

fn ratio(s: &load::Split) -> String {
    if s.snapshot == 0 {
        "no snapshot".into()
    } else {
        format!("{:.2}×", s.log_store as f64 / s.snapshot as f64)
    }
}

/// `xcecli_joblist` of everything through the C API: how long, or why it failed (or
/// returned other than the `n` jobs).
fn listing(masters: &str, n: u64) -> Result<Duration, String> {
    let list = load::c_joblist_ids(masters)?;
    if list.rc == n as i64 {
        Ok(list.took)
    } else if list.rc >= 0 {
        Err(format!("{} of {n} jobs", list.rc))
    } else {
        Err(format!(
            "{} after {:.0} s",
            xce::strerror(list.rc as i32),
            list.took.as_secs_f64()
        ))
    }
}

/// kill -9 of a standby, started again from its own data directory: until it answers (and
/// then 2 s for it to load its snapshot).
fn restart_standby(c: &mut Cluster, p: u32) -> Result<Option<Duration>, String> {
    let s = (1..=3u32).find(|&i| i != p).unwrap();
    c.kill(s);
    c.restart(s).map_err(|e| e.to_string())?;
    let restart = wait_answers(c, s, Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(2));
    Ok(restart)
}

/// C12's line: a node whose data was lost has caught up with its leader (whichever way).
const CAUGHT_UP: &str = "votes and campaigns again";

/// Catch-up: a standby restarted on an empty data directory, until its log says it has caught
/// up with the primary (C12: its log reaches the leader's commit index — from the primary's
/// snapshot, or from its log when it still holds everything), then 2 s. Whether it installed a
/// snapshot to get there.
fn catch_up_standby(
    c: &mut Cluster,
    p: u32,
    logs: &Path,
) -> Result<(Option<Duration>, bool), String> {
    let s2 = (1..=3u32).rev().find(|&i| i != p).unwrap();
    let (caught, installed) = (
        count_log(logs, s2, CAUGHT_UP),
        count_log(logs, s2, "installed snapshot"),
    );
    c.kill(s2);
    let _ = std::fs::remove_dir_all(load::node_dir(c, s2));
    c.restart(s2).map_err(|e| e.to_string())?;
    let catchup = wait_log(logs, s2, CAUGHT_UP, caught, Duration::from_secs(300));
    std::thread::sleep(Duration::from_secs(2));
    Ok((
        catchup,
        count_log(logs, s2, "installed snapshot") > installed,
    ))
}

/// Failover: kill -9 the primary; time until another node serves as primary.
fn fail_over(c: &mut Cluster) -> Result<Option<Duration>, String> {
    let p = c
        .wait_primary(Duration::from_secs(5))
        .ok_or("no primary before the kill")?;
    let t0 = Instant::now();
    c.kill(p);
    Ok(c.wait_new_primary(p, Duration::from_secs(60))
        .map(|_| t0.elapsed()))
}

/// P12's targets (the fifth round's amendment).
pub const FAILOVER_MS: f64 = 150.0;
pub const DURING_SLACK_MS: f64 = 50.0;
pub const DISK_PER_JOB: f64 = 300.0;
pub const LOG_OVER_SNAPSHOT: f64 = 2.0;

/// The P12 tables: what each node holds and what the operations took, and what happened
/// during the load — a row per table size, the baseline build's first when given (round for
/// round: each size on both builds before the next size).
pub fn tables(a: &ScaleOpts, logs: &Path) -> Result<(Vec<Table>, Vec<Row>), String> {
    let mut rows = Vec::new();
    for &n in &a.jobs {
        if let Some(b) = &a.baseline {
            rows.push(p12_row("baseline", b, n, logs)?);
        }
        rows.push(p12_row("this branch", &a.ours, n, logs)?);
    }
    let ours: Vec<&Row> = rows.iter().filter(|r| r.controller != "baseline").collect();
    let mut held = held_table(&rows);
    let mut during = during_table(&rows);
    judge_held(&mut held, &ours);
    judge_during(&mut during, &ours);
    Ok((vec![held, during], rows))
}

fn held_table(rows: &[Row]) -> Table {
    let mut t = Table::new("P12", "scale of the job table");
    t.note("typical jobs (≈ 90 bytes of text: name, user of 50, a one-line command) loaded by 64 contexts; RSS and disk per stored job for each node (P = primary; disk = the node's data directory, st_blocks); log/snapshot = each node's log store (everything in its data directory but the snapshot) against its snapshot file, MB; joblist = xcecli_joblist of everything through the C API, end to end; restart = kill -9 a standby and start it on its data: until it answers; catch-up = a standby restarted on an EMPTY data directory: until it has caught up with the primary (C12's line), and how; failover = kill -9 the primary: until another node answers hello as primary");
    t.columns(&[
        "controller",
        "jobs",
        "load",
        "RSS B/job",
        "disk B/job",
        "log/snapshot MB",
        "joblist",
        "restart ms",
        "catch-up ms",
        "failover ms",
    ]);
    for r in rows {
        t.row(r.cells());
    }
    t
}

fn during_table(rows: &[Row]) -> Table {
    let mut t = Table::new("P12", "during the load: snapshots, writes, elections");
    t.note(format!("the same rows: snapshots written / installed on all three nodes while the table was loaded (and 3 s after), the longest to write; each acknowledged write is during a snapshot when it was in flight while any node wrote or installed one, or within {AFTER_SNAPSHOT_MS} ms after (the purge that follows it), outside otherwise: how many, and the p99 of each (ms); step-downs = a primary's \"no answer from a quorum … not serving as primary\"; elections = campaigns started — no fault was injected during the load"));
    t.columns(&[
        "controller",
        "jobs",
        "snapshots built / installed",
        "longest ms",
        "writes during / outside",
        "p99 during ms",
        "p99 outside ms",
        "step-downs",
        "elections",
    ]);
    for r in rows {
        t.row(r.during_cells());
    }
    t
}

fn judge_held(t: &mut Table, ours: &[&Row]) {
    let Some(big) = ours.iter().max_by_key(|r| r.jobs) else {
        return;
    };
    t.target(
        format!(
            "≤ 1 KB controller RSS per job (largest table measured: {} jobs, worst node)",
            big.jobs
        ),
        Verdict::from(
            big.worst_rss() <= 1024.0,
            format!("{:.0} B/job", big.worst_rss()),
        ),
    );
    t.target(
        format!(
            "disk ≤ {DISK_PER_JOB:.0} B per job ({} jobs, worst node)",
            big.jobs
        ),
        Verdict::from(
            big.worst_disk() <= DISK_PER_JOB,
            format!("{:.0} B/job", big.worst_disk()),
        ),
    );
    let worst = ours
        .iter()
        .map(|r| {
            r.failover
                .map_or(f64::INFINITY, |d| d.as_secs_f64() * 1000.0)
        })
        .fold(0.0, f64::max);
    t.target(
        format!("failover ≤ {FAILOVER_MS:.0} ms at every size"),
        Verdict::from(worst <= FAILOVER_MS, format!("worst {worst:.0} ms")),
    );
}

fn judge_during(t: &mut Table, ours: &[&Row]) {
    let elections: usize = ours
        .iter()
        .map(|r| r.during.elections + r.during.step_downs)
        .sum();
    t.target(
        "0 step-downs and 0 elections without a fault",
        Verdict::from(
            elections == 0,
            format!("{elections} step-downs and elections"),
        ),
    );
    let worst = ours
        .iter()
        .filter_map(|r| Some(r.during.in_snapshot?.p99 - r.during.outside?.p99))
        .fold(f64::NEG_INFINITY, f64::max);
    t.target(
        format!("p99 of writes during a snapshot ≤ outside + {DURING_SLACK_MS:.0} ms"),
        if worst.is_finite() {
            Verdict::from(
                worst <= DURING_SLACK_MS,
                format!("worst: during − outside = {worst:+.1} ms"),
            )
        } else {
            Verdict::NotMeasured("no writes during (or outside) a snapshot".into())
        },
    );
}

/// What one controller build's log store holds against its snapshot after `n` small jobs
/// submitted one at a time through one context (one Raft entry each).
pub fn one_by_one_row(
    name: &str,
    bin: &Path,
    n: u64,
    logs: &Path,
) -> Result<(Vec<String>, f64), String> {
    let c = load::cluster_of(bin, logs)?;
    let took = load::submit_one_by_one(&c.masters(), n, load::small_job)?;
    // Let the last snapshot and its purge land.
    std::thread::sleep(Duration::from_secs(3));
    let splits: Vec<load::Split> = c
        .nodes
        .iter()
        .map(|node| load::split(&load::node_dir(&c, node.id)))
        .collect();
    let worst = splits
        .iter()
        .map(|s| s.log_store as f64 / s.snapshot.max(1) as f64)
        .fold(0.0, f64::max);
    let mut cells = vec![
        name.to_string(),
        n.to_string(),
        format!("{:.0}/s", n as f64 / took.as_secs_f64()),
    ];
    for s in &splits {
        cells.push(format!(
            "{:.2} / {:.2} ({}); {:.0} B per job",
            s.log_store as f64 / 1e6,
            s.snapshot as f64 / 1e6,
            ratio(s),
            (s.log_store + s.snapshot) as f64 / n as f64
        ));
    }
    Ok((cells, worst))
}

/// P12's log store against the snapshot: `n` small jobs one at a time through one context, on
/// each build (the baseline's first).
pub fn one_by_one_table(a: &ScaleOpts, n: u64, logs: &Path) -> Result<Table, String> {
    let mut t = Table::new(
        "P12",
        "the log store against the snapshot, one write per entry",
    );
    t.note(format!("{n} small jobs (name j…, user alice, command `true`) submitted one at a time through one context, so each is a Raft entry of its own; 3 s later, each node's log store (its data directory but the snapshot) / its snapshot file, MB (st_blocks), their ratio, and both per job"));
    t.columns(&["controller", "jobs", "rate", "node 1", "node 2", "node 3"]);
    if let Some(b) = &a.baseline {
        t.row(one_by_one_row("baseline", b, n, logs)?.0);
    }
    let (cells, ours) = one_by_one_row("this branch", &a.ours, n, logs)?;
    t.row(cells);
    t.target(
        format!("the log store ≤ {LOG_OVER_SNAPSHOT:.0}× the snapshot on every node"),
        Verdict::from(ours <= LOG_OVER_SNAPSHOT, format!("worst node {ours:.2}×")),
    );
    Ok(t)
}
