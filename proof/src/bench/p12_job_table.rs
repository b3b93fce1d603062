//! P12: the job table at scale — memory and disk per stored job at 10^4–10^6 jobs, a listing of
//! everything through the C API, a restart on the node's data, a catch-up from an empty data
//! directory, a failover — and the long run (`--soak`): memory per job over minutes of churn.
//! Run by `xce-scale` ([`super::suite::scale`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::load;
use super::steady::lib_client;
use super::table::{Table, Verdict};
use super::ScaleOpts;
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
    let path = logs.join(format!("node-{id}.log"));
    while t0.elapsed() < timeout {
        let n = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .matches(what)
            .count();
        if n > before {
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

fn ms(d: Option<Duration>) -> String {
    d.map_or("—".into(), |d| format!("{:.0}", d.as_secs_f64() * 1000.0))
}

/// One row of P12: a fresh cluster of `bin` loaded with `n` jobs; what each node holds, a
/// listing of everything, a standby restarted on its data, a standby caught up from an empty
/// directory, a failover. Returns the worst node's RSS per job and the failover's time.
fn p12_row(
    t: &mut Table,
    name: &str,
    bin: &Path,
    n: u64,
    logs: &Path,
) -> Result<(f64, Option<Duration>), String> {
    let mut c = load::cluster_of(bin, logs)?;
    let m = c.masters();
    let load = load::load_jobs(&m, n, 64)?;
    // Let snapshots and compaction settle.
    std::thread::sleep(Duration::from_secs(3));
    let p = c.wait_primary(Duration::from_secs(5)).ok_or("no primary")?;
    let held = Held::of(&c, p, n);
    let list_cell = listing(&m)?;
    let restart = restart_standby(&mut c, p)?;
    let catchup = catch_up_standby(&mut c, p, logs)?;
    let failover = fail_over(&mut c)?;
    t.row(vec![
        name.into(),
        n.to_string(),
        format!("{:.0}/s", n as f64 / load.as_secs_f64()),
        held.rss.join(" / "),
        held.disk.join(" / "),
        list_cell,
        ms(restart),
        ms(catchup),
        ms(failover),
    ]);
    Ok((held.worst_rss, failover))
}

/// What each node holds per stored job: RSS (the primary's marked `P`) and disk, and the
/// worst node's RSS per job.
struct Held {
    rss: Vec<String>,
    disk: Vec<String>,
    worst_rss: f64,
}

impl Held {
    fn of(c: &Cluster, p: u32, n: u64) -> Held {
        let mut rss = Vec::new();
        let mut disk = Vec::new();
        for node in &c.nodes {
            let r = node.pid().and_then(load::rss_bytes).unwrap_or(0) as f64 / n as f64;
            rss.push(format!("{}{:.0}", if node.id == p { "P " } else { "" }, r));
            disk.push(format!(
                "{:.0}",
                load::disk_bytes(&load::node_dir(c, node.id)) as f64 / n as f64
            ));
        }
        let worst_rss = c
            .nodes
            .iter()
            .map(|x| x.pid().and_then(load::rss_bytes).unwrap_or(0))
            .max()
            .unwrap_or(0) as f64
            / n as f64;
        Held {
            rss,
            disk,
            worst_rss,
        }
    }
}

/// `xcecli_joblist` of everything through the C API: how long, and how many jobs.
fn listing(masters: &str) -> Result<String, String> {
    let list = load::c_joblist_ids(masters)?;
    Ok(if list.rc >= 0 {
        format!(
            "{:.0} ms ({} jobs)",
            list.took.as_secs_f64() * 1000.0,
            list.rc
        )
    } else {
        format!(
            "{} after {:.0} s",
            xce::strerror(list.rc as i32),
            list.took.as_secs_f64()
        )
    })
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

/// Catch-up: a standby with an empty data directory gets the snapshot from the primary; until
/// its log says it installed it (and then 2 s).
fn catch_up_standby(c: &mut Cluster, p: u32, logs: &Path) -> Result<Option<Duration>, String> {
    let s2 = (1..=3u32).rev().find(|&i| i != p).unwrap();
    let before = count_log(logs, s2, "installed snapshot");
    c.kill(s2);
    let _ = std::fs::remove_dir_all(load::node_dir(c, s2));
    c.restart(s2).map_err(|e| e.to_string())?;
    let catchup = wait_log(
        logs,
        s2,
        "installed snapshot",
        before,
        Duration::from_secs(120),
    );
    std::thread::sleep(Duration::from_secs(2));
    Ok(catchup)
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

/// The P12 table: a row per table size (and the baseline binary at 10^4 jobs first).
pub fn table(a: &ScaleOpts, logs: &Path) -> Result<Table, String> {
    let mut t = Table::new("P12", "scale of the job table");
    t.note("typical jobs (≈ 90 bytes of text: name, user of 50, a one-line command) loaded by 64 contexts; RSS and disk per stored job for each node (P = primary; disk = the node's data directory, st_blocks); joblist = xcecli_joblist of everything through the C API, end to end; restart = kill -9 a standby and start it on its data: until it answers; catch-up = a standby restarted on an EMPTY data directory: until it has installed the primary's snapshot; failover = kill -9 the primary: until another node answers hello as primary");
    t.header = [
        "controller",
        "jobs",
        "load",
        "RSS B/job",
        "disk B/job",
        "joblist",
        "restart ms",
        "catch-up ms",
        "failover ms",
    ]
    .map(String::from)
    .to_vec();
    if let Some(b) = &a.baseline {
        p12_row(&mut t, "baseline", b, 10_000, logs)?;
    }
    let mut worst = 0.0f64;
    let mut fo_ok = true;
    let mut at_max = 0;
    for &n in &a.jobs {
        let (rss, fo) = p12_row(&mut t, "this branch", &a.ours, n, logs)?;
        if n >= at_max {
            at_max = n;
            worst = rss;
            fo_ok = fo.is_some_and(|d| d <= Duration::from_secs(1));
        }
    }
    t.target(
        format!(
            "≤ 1 KB controller RSS per job (largest table measured: {at_max} jobs, worst node)"
        ),
        Verdict::from(worst <= 1024.0, format!("{worst:.0} B/job")),
    );
    t.target(
        format!("failover ≤ 1 s with {at_max} jobs stored"),
        Verdict::from(fo_ok, "see the failover column".into()),
    );
    Ok(t)
}

/// The long run: a table of `base` jobs, then `minutes` of 16 contexts submitting and
/// killing jobs (every kill is a write to an existing job, so copy-on-write and the interned
/// texts churn) with a full listing every 20 s; RSS per job of each node every minute; at
/// the end one standby restarts on its data, and its RSS per job is compared with the
/// long-lived nodes'.
pub fn soak(a: &ScaleOpts, logs: &Path, base: u64, minutes: u64) -> Result<Table, String> {
    let mut c = load::cluster_of(&a.ours, logs)?;
    let m = c.masters();
    load::load_jobs(&m, base, 64)?;
    let mut t = Table::new("P12-soak", "memory per job over a long run");
    t.note(format!(
        "{base} typical jobs, then {minutes} min of 16 contexts each submitting a job and killing the one it submitted before (two writes), and a full xcecli_joblist every 20 s; RSS of each node / jobs stored"
    ));
    t.header = ["minute", "jobs", "writes", "RSS B/job n1", "n2", "n3"]
        .map(String::from)
        .to_vec();
    let churn = Churn::start(&m)?;
    let t0 = Instant::now();
    let mut jobs = base;
    for minute in 0..=minutes {
        while t0.elapsed() < Duration::from_secs(60 * minute) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let w = churn.writes.load(Ordering::Relaxed);
        jobs = base + w.div_ceil(2);
        t.row(rss_row(
            &c,
            vec![minute.to_string(), jobs.to_string(), w.to_string()],
            jobs,
        ));
    }
    churn.stop();
    let p = c.wait_primary(Duration::from_secs(5)).ok_or("no primary")?;
    let s = (1..=3u32).find(|&i| i != p).unwrap();
    c.restart(s).map_err(|e| e.to_string())?;
    wait_answers(&c, s, Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(10));
    t.row(rss_row(
        &c,
        vec![format!("node {s} restarted"), jobs.to_string(), "—".into()],
        jobs,
    ));
    Ok(t)
}

/// `first` followed by each node's RSS per job of `jobs`.
fn rss_row(c: &Cluster, mut first: Vec<String>, jobs: u64) -> Vec<String> {
    for n in &c.nodes {
        let r = n.pid().and_then(load::rss_bytes).unwrap_or(0);
        first.push(format!("{:.0}", r as f64 / jobs as f64));
    }
    first
}

/// The long run's load: 16 contexts each submitting a job and killing the one before, and a
/// lister listing everything every 20 s.
struct Churn {
    stop: Arc<AtomicBool>,
    /// Writes acknowledged (a submit or a kill each).
    writes: Arc<AtomicU64>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Churn {
    fn start(masters: &str) -> Result<Churn, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        for _ in 0..16 {
            let cl = lib_client(masters)?;
            let (stop, writes) = (stop.clone(), writes.clone());
            handles.push(std::thread::spawn(move || {
                let mut prev = None;
                while !stop.load(Ordering::Relaxed) {
                    let id = load::next_job_id();
                    if cl.jobsubmit(load::typical_job(id)).is_ok() {
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(p) = prev.replace(id) {
                        if cl.jobctrl(p, xce_proto::wire::JobAction::Kill).is_ok() {
                            writes.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        let lister = {
            let (stop, m) = (stop.clone(), masters.to_string());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = load::c_joblist_ids(&m);
                    for _ in 0..200 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })
        };
        handles.push(lister);
        Ok(Churn {
            stop,
            writes,
            handles,
        })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
    }
}
