//! P14: congested links (amended by issue 29). A 3-node cluster in network namespaces
//! ([`crate::harness::netns`]) with every link — clients' and peers' — limited to a low rate by
//! a token bucket; writers submitting as fast as the cluster takes them (so replication is
//! bulk traffic on the peer links) and listers reading the whole job table back to back through
//! the library (bulk replies on the client links), on a table pre-filled before the shaping. A
//! round measures a stretch of congestion alone (elections — there should be none —, the
//! writers' longest wait, the listings), then, still congested, a fault (the primary killed or
//! blackholed, or none): the elections until every writer is served again, and how long the
//! writers went without a success.
//!
//! Terms and roles are read from each node's metrics endpoint on the loopback of its own
//! namespace, which no shaping or fault touches (a probe over the congested client link could
//! wait seconds behind the listings).
//!
//! Used by the `xce-congestion` command (the P14 table).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::{new_job_id, Client, JobPager};
use xce::Error;
use xce_proto::wire::{JobFilter, JobSpec};

use crate::bench::args::Common;
use crate::bench::kills::Quiet;
use crate::bench::plan::{log_dir, Plan, ROUND_BOUND};
use crate::bench::steady::named_client;
use crate::bench::table::{num, Table, Verdict};
use crate::bench::Summary;
use crate::harness::netns::{self, Fault, NetCluster};
use crate::harness::sides::{self, Row};

/// Every node's `--metrics` port, on 127.0.0.1 inside its own namespace.
pub const METRICS_PORT: u16 = 9100;
/// Bound on one request to a node's metrics endpoint.
const METRICS_BOUND: Duration = Duration::from_secs(2);
/// After the fault (the kill, the heal), how long every writer has to be served again before
/// the round ends anyway (their unavailability then shows it).
pub const SERVED_BOUND: Duration = Duration::from_secs(30);
/// Measured on after every writer was served again: later elections still count.
const TAIL: Duration = Duration::from_secs(2);
/// Threads that pre-fill the job table.
const FILLERS: usize = 4;
/// How many times one listing starts over on a lost snapshot (as `joblist_paged`).
const RESTARTS: u32 = xce::client::MAX_LISTING_RESTARTS;

/// The fault a round sets after its stretch of congestion alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// None: the round is the congestion alone.
    None,
    /// `kill -9` of the primary (not restarted within the round).
    Kill,
    /// Both of the primary's links down for [`Plan::fault_for`], then up again.
    Blackhole,
}

impl FaultKind {
    /// `none`, `kill`, `blackhole`.
    pub fn parse(s: &str) -> Option<FaultKind> {
        match s {
            "none" => Some(FaultKind::None),
            "kill" => Some(FaultKind::Kill),
            "blackhole" => Some(FaultKind::Blackhole),
            _ => None,
        }
    }
}

/// What P14 adds to a [`Plan`] (whose `writers` and `readers` are the writer and lister
/// threads): the links' shaping, the table, the calm stretch, the fault.
#[derive(Debug, Clone)]
pub struct Links {
    /// tc's rate for every link, e.g. `1mbit`.
    pub rate: String,
    /// tc's queue bound for every link (tbf `latency`), e.g. `50ms`.
    pub latency: String,
    /// Bytes of each job's command (the size of a log entry and of a listed job follow it).
    pub command_bytes: usize,
    /// Jobs submitted before the shaping (what each listing reads, with the writers' jobs).
    pub jobs: usize,
    /// The largest page a lister asks for (0: the controller's choice, 64 KiB).
    pub page_bytes: u32,
    /// Congestion without a fault, from the clients' start.
    pub calm_for: Duration,
    /// The fault after the calm stretch.
    pub fault: FaultKind,
    /// P16: kills of the primary on quiet links before each round, same build (0: none).
    pub quiet_kills: usize,
}

/// How a round runs (issue 29's amended P14): every link at 1 Mbit/s (tbf queue 50 ms), 1,000
/// jobs of 256-byte commands pre-filled, 3 writers submitting back to back and 3 listers
/// listing the whole table back to back, 20 s of congestion alone, then the primary killed.
pub fn plan() -> Plan<Links> {
    Plan {
        writers: 3,
        readers: 3,
        fault_for: Duration::from_secs(4),
        ..Plan::with(Links {
            rate: "1mbit".into(),
            latency: "50ms".into(),
            command_bytes: 256,
            jobs: 1000,
            page_bytes: 0,
            calm_for: Duration::from_secs(20),
            fault: FaultKind::Kill,
            quiet_kills: 0,
        })
    }
}

/// One call of a writer: when it started and ended (from the round's origin), and whether it
/// succeeded.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub start: Duration,
    pub end: Duration,
    pub ok: bool,
}

/// How one listing ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Complete: this many jobs.
    Listed(usize),
    /// The library returned this error.
    Failed(String),
    /// Still running when the round ended (stopped by it).
    Cut,
}

/// One listing of the whole table: start and end (from the round's origin), its ending, and
/// the times it started over on a lost snapshot (-ESTALE).
#[derive(Debug, Clone)]
pub struct Listing {
    pub start: Duration,
    pub end: Duration,
    pub ending: Ending,
    pub restarts: u32,
}

/// One round's outcome.
#[derive(Debug, Clone)]
pub struct RoundResult {
    /// Elections (term increments) while the links were congested and nothing failed.
    pub calm_elections: u64,
    /// Elections from the fault until every writer was served again (and [`TAIL`] after);
    /// `None` without a fault.
    pub fault_elections: Option<u64>,
    /// Writes acknowledged during the calm stretch.
    pub calm_writes: usize,
    /// The longest time any writer went without a success during the calm stretch.
    pub calm_wait: Duration,
    /// The longest single call that ended during the calm stretch.
    pub calm_call: Duration,
    /// Per writer, the longest time without a success from the fault to the round's end
    /// (empty without a fault).
    pub unavailable: Vec<Duration>,
    /// Writer calls that failed (any error), the whole round.
    pub errors: usize,
    /// Every listing of the round.
    pub listings: Vec<Listing>,
    /// Listers that completed no listing in the round.
    pub idle_listers: usize,
    /// Times a primary stopped serving during the calm stretch, closing its clients'
    /// connections ([`STEP_DOWN_LINE`] in the node logs; 0 without logs).
    pub calm_step_downs: usize,
    /// The library's counters.
    pub library: Library,
    /// KB/s sent during the calm stretch on the busiest node's peer link and on the busiest
    /// node's client link (a link carries 125 KB/s at 1 Mbit/s).
    pub uplinks: [f64; 2],
    /// What the nodes' counters say about candidacies and forwards (for the log line).
    pub campaigns: String,
    /// P16 (`--p16 N`): the same build's kills on quiet links, measured before this round.
    pub quiet: Option<Quiet>,
}

fn spec(name: &str, command: &str) -> JobSpec {
    JobSpec {
        job_id: new_job_id(),
        name: name.into(),
        user: "p14".into(),
        queue: String::new(),
        command: command.into(),
        ncpus: 1,
        mem_mb: 1,
    }
}

/// Submits `plan`'s jobs before the shaping, with [`FILLERS`] threads in the client namespace.
fn prefill(cluster: &NetCluster, plan: &Plan<Links>) -> Result<(), String> {
    let n = plan.more.jobs;
    let command = "f".repeat(plan.more.command_bytes);
    let per = n.div_ceil(FILLERS);
    let fillers: Vec<_> = (0..FILLERS)
        .map(|t| {
            let (ns, masters, command) = (
                cluster.client_ns.clone(),
                cluster.masters(),
                command.clone(),
            );
            let count = per.min(n.saturating_sub(t * per));
            std::thread::spawn(move || -> Result<(), String> {
                netns::enter(&ns).map_err(|e| format!("enter {ns}: {e}"))?;
                let client = named_client(&masters, "p14")?;
                for i in 0..count {
                    client
                        .jobsubmit(spec(&format!("fill-{t}-{i}"), &command))
                        .map_err(|e| format!("pre-fill submit: {e}"))?;
                }
                client.close();
                Ok(())
            })
        })
        .collect();
    for f in fillers {
        f.join().map_err(|_| "a pre-fill thread panicked")??;
    }
    Ok(())
}

/// The library's counters of a round's contexts, summed: `[writers, listers]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Library {
    /// Attempts beyond the first of a call (a reply timeout re-sends, a failover retries).
    pub retries: [u64; 2],
    /// Moves from one controller to another, or reconnects to the same one.
    pub rotations: [u64; 2],
}

/// What a round's clients recorded.
struct Records {
    /// Per writer, its calls.
    calls: Vec<Vec<Call>>,
    /// Per lister, its listings.
    listings: Vec<Vec<Listing>>,
    library: Library,
}

/// The writer and lister threads of a round, each with a context of its own.
struct Crew {
    writers: Vec<JoinHandle<Result<Vec<Call>, String>>>,
    listers: Vec<JoinHandle<Result<Vec<Listing>, String>>>,
    /// A handle of every context (and whether a writer's), to stop the calls in progress at
    /// the end and read the library's counters.
    clients: Vec<(bool, Client)>,
    /// Per writer, its last success (ms from the origin, +1; 0: none yet).
    served: Vec<Arc<AtomicU64>>,
    stop: Arc<AtomicBool>,
}

/// What every client thread gets: where it runs, what it calls, when the round began.
#[derive(Clone)]
struct Seat {
    ns: String,
    masters: String,
    origin: Instant,
    stop: Arc<AtomicBool>,
    /// Sends the thread's context to the round, once started (and whether a writer's).
    started: mpsc::Sender<(bool, Client)>,
}

impl Seat {
    /// Enters the namespace and starts a context, handing a handle of it to the round.
    fn sit(&self, writer: bool) -> Result<Client, String> {
        netns::enter(&self.ns).map_err(|e| format!("enter {}: {e}", self.ns))?;
        let client = named_client(&self.masters, "p14")?;
        self.started
            .send((writer, client.clone()))
            .map_err(|_| "the round is gone")?;
        Ok(client)
    }
}

fn writer(
    seat: Seat,
    command: String,
    served: Arc<AtomicU64>,
) -> JoinHandle<Result<Vec<Call>, String>> {
    std::thread::spawn(move || {
        let client = seat.sit(true)?;
        let mut calls = Vec::new();
        while !seat.stop.load(Ordering::Relaxed) {
            let start = seat.origin.elapsed();
            let r = client.jobsubmit(spec("p14", &command));
            let end = seat.origin.elapsed();
            match r {
                Ok(_) => {
                    served.store(end.as_millis() as u64 + 1, Ordering::Relaxed);
                    calls.push(Call {
                        start,
                        end,
                        ok: true,
                    });
                }
                Err(Error::StopRequested | Error::Closed) => break,
                Err(_) => {
                    calls.push(Call {
                        start,
                        end,
                        ok: false,
                    });
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Ok(calls)
    })
}

/// One listing of the whole table through the library's pager (what `xcecli_joblist_open` /
/// `xcecli_joblist_next` use), started over on -ESTALE as `Client::joblist_paged` does.
fn list_all(pager: &mut JobPager) -> (Result<usize, Error>, u32) {
    let (mut n, mut restarts) = (0, 0);
    loop {
        match pager.next_page() {
            Ok(Some(page)) => n += page.len(),
            Ok(None) => return (Ok(n), restarts),
            Err(Error::Errno(libc::ESTALE)) if restarts < RESTARTS => {
                restarts += 1;
                n = 0;
            }
            Err(e) => return (Err(e), restarts),
        }
    }
}

fn lister(seat: Seat, page_bytes: u32) -> JoinHandle<Result<Vec<Listing>, String>> {
    std::thread::spawn(move || {
        let client = seat.sit(false)?;
        let mut listings = Vec::new();
        while !seat.stop.load(Ordering::Relaxed) {
            let start = seat.origin.elapsed();
            let mut pager = client.joblist_pager(JobFilter::default(), page_bytes);
            let (r, restarts) = list_all(&mut pager);
            let ending = match r {
                Ok(n) => Ending::Listed(n),
                Err(Error::StopRequested | Error::Closed) => Ending::Cut,
                Err(e) => Ending::Failed(e.to_string()),
            };
            let failed = matches!(ending, Ending::Failed(_));
            listings.push(Listing {
                start,
                end: seat.origin.elapsed(),
                ending,
                restarts,
            });
            if failed {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(listings)
    })
}

impl Crew {
    /// Starts `plan`'s writers and listers in the client namespace; returns once every
    /// context has started.
    fn start(cluster: &NetCluster, plan: &Plan<Links>, origin: Instant) -> Result<Crew, String> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let seat = Seat {
            ns: cluster.client_ns.clone(),
            masters: cluster.masters(),
            origin,
            stop: stop.clone(),
            started: tx,
        };
        let command = "x".repeat(plan.more.command_bytes);
        let served: Vec<_> = (0..plan.writers)
            .map(|_| Arc::new(AtomicU64::new(0)))
            .collect();
        let writers = served
            .iter()
            .map(|s| writer(seat.clone(), command.clone(), s.clone()))
            .collect();
        let listers = (0..plan.readers)
            .map(|_| lister(seat.clone(), plan.more.page_bytes))
            .collect();
        drop(seat);
        let mut crew = Crew {
            writers,
            listers,
            clients: Vec::new(),
            served,
            stop,
        };
        while crew.clients.len() < plan.writers + plan.readers {
            match rx.recv_timeout(ROUND_BOUND) {
                Ok(c) => crew.clients.push(c),
                Err(_) => {
                    let _ = crew.finish();
                    return Err("a client thread did not start its context".into());
                }
            }
        }
        Ok(crew)
    }

    /// Whether every writer has had a success after `t` (from the origin).
    fn all_served_after(&self, t: Duration) -> bool {
        let t = t.as_millis() as u64 + 1;
        self.served.iter().all(|s| s.load(Ordering::Relaxed) > t)
    }

    /// Waits until every writer has had a success after `t`, at most `bound`.
    fn wait_served_after(&self, t: Duration, bound: Duration) {
        let deadline = Instant::now() + bound;
        while !self.all_served_after(t) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops every thread (the calls in progress end with a stop request) and collects their
    /// calls and listings, and the library's counters.
    fn finish(self) -> Result<Records, String> {
        self.stop.store(true, Ordering::Relaxed);
        for (_, c) in &self.clients {
            c.request_stop();
        }
        let mut calls = Vec::new();
        for h in self.writers {
            calls.push(h.join().map_err(|_| "writer thread panicked")??);
        }
        let mut listings = Vec::new();
        for h in self.listers {
            listings.push(h.join().map_err(|_| "lister thread panicked")??);
        }
        let mut library = Library::default();
        for (writer, c) in &self.clients {
            let st = c.stats();
            let k = usize::from(!writer);
            library.retries[k] += st.retries;
            library.rotations[k] += st.rotations;
            c.close();
        }
        Ok(Records {
            calls,
            listings,
            library,
        })
    }
}

/// Node `id`'s metrics text, from its own namespace's loopback.
fn metrics(cluster: &NetCluster, id: u32) -> Option<String> {
    cluster
        .node_http(id, METRICS_PORT, "GET", "/metrics", "", METRICS_BOUND)
        .ok()
        .filter(|(status, _)| status.contains(" 200"))
        .map(|(_, body)| body)
}

/// The value of the unlabelled series `name` in a metrics text.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The running nodes' metrics texts.
fn all_metrics(cluster: &NetCluster) -> Vec<(u32, String)> {
    cluster
        .nodes
        .iter()
        .filter(|n| n.is_running())
        .filter_map(|n| Some((n.id, metrics(cluster, n.id)?)))
        .collect()
}

/// The highest raft term of the running nodes. Every election, won or not, raises some node's
/// term by one.
fn max_term(cluster: &NetCluster) -> Option<u64> {
    all_metrics(cluster)
        .iter()
        .filter_map(|(_, m)| series(m, "xce_raft_term"))
        .map(|t| t as u64)
        .max()
}

/// The node whose metrics say it is the serving primary, polled for up to `bound`.
fn primary(cluster: &NetCluster, bound: Duration) -> Option<u32> {
    let deadline = Instant::now() + bound;
    loop {
        let p = all_metrics(cluster)
            .into_iter()
            .find(|(_, m)| series(m, "xce_is_primary") == Some(1.0))
            .map(|(id, _)| id);
        if p.is_some() || Instant::now() >= deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The counters [`counts`] sums, with the word it prints for each.
const COUNTED: [(&str, &str); 3] = [
    ("xce_campaigns_total{", "campaigns"),
    ("xce_pre_votes_total{", "pre-votes"),
    ("xce_forwards_total{", "forwards"),
];

/// The running nodes' candidacy and forwarding counters (C15, C16), summed by label:
/// `campaigns campaigned 1, campaigns not_granted 2, forwards replied 40, pre-votes refused 3`
/// — what led to the round's elections, and how many client requests the standbys forwarded
/// to the primary over the raft links.
fn counts(cluster: &NetCluster) -> String {
    let mut sums: Vec<(String, f64)> = Vec::new();
    for (_, m) in all_metrics(cluster) {
        for l in m.lines() {
            let Some((what, rest)) = COUNTED
                .iter()
                .find_map(|(prefix, what)| Some((*what, l.strip_prefix(prefix)?)))
            else {
                continue;
            };
            let Some((labels, v)) = rest.rsplit_once("} ") else {
                continue;
            };
            let label = labels
                .split_once('=')
                .map_or(labels, |x| x.1)
                .trim_matches('"');
            let key = format!("{what} {label}");
            let v: f64 = v.trim().parse().unwrap_or(0.0);
            match sums.iter_mut().find(|(k, _)| *k == key) {
                Some(s) => s.1 += v,
                None => sums.push((key, v)),
            }
        }
    }
    sums.sort_by(|a, b| a.0.cmp(&b.0));
    let parts: Vec<String> = sums.iter().map(|(k, v)| format!("{k} {v}")).collect();
    if parts.is_empty() {
        "no candidacy or forward counted".into()
    } else {
        parts.join(", ")
    }
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

/// The fault of `plan` at the end of the calm stretch, then the wait until every writer is
/// served again (at most [`SERVED_BOUND`]) and [`TAIL`]. Returns the highest term seen while
/// a blackholed primary was away (the others' elections), if one was read.
fn fault(
    cluster: &mut NetCluster,
    plan: &Plan<Links>,
    crew: &Crew,
    origin: Instant,
    marks: &mut Marks,
) -> Result<Option<u64>, String> {
    if plan.more.fault == FaultKind::None {
        return Ok(None);
    }
    let t_fault = origin.elapsed();
    let p = primary(cluster, Duration::from_secs(5)).ok_or("no primary at the fault")?;
    marks.mark(&format!("round: {:?} of node {p}", plan.more.fault));
    let during = match plan.more.fault {
        FaultKind::None => None,
        FaultKind::Kill => {
            cluster.kill(p);
            None
        }
        FaultKind::Blackhole => {
            cluster
                .fault(Fault::Blackhole(p), true)
                .map_err(|e| format!("fault: {e}"))?;
            std::thread::sleep(plan.fault_for);
            let during = max_term(cluster);
            cluster
                .fault(Fault::Blackhole(p), false)
                .map_err(|e| format!("heal: {e}"))?;
            marks.mark("round: healed");
            during
        }
    };
    crew.wait_served_after(t_fault, SERVED_BOUND);
    marks.mark(match crew.all_served_after(t_fault) {
        true => "round: every writer served since the fault",
        false => "round: not every writer served within the bound",
    });
    std::thread::sleep(TAIL);
    Ok(during)
}

/// The round's timeline in `rounds.log` beside the node logs, stamped as they are (UTC), so
/// that their lines can be read against the shaping, the fault and the end.
struct Marks(Option<std::fs::File>);

impl Marks {
    fn open(plan: &Plan<Links>) -> Marks {
        let file = plan.log_dir.as_ref().and_then(|d| {
            std::fs::create_dir_all(d).ok()?;
            let path = d.join("rounds.log");
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()
        });
        Marks(file)
    }

    fn mark(&mut self, what: &str) {
        use std::io::Write;
        if let Some(f) = &mut self.0 {
            let now = crate::bench::nodelog::utc(std::time::SystemTime::now());
            let _ = writeln!(f, "{now} {what}");
        }
    }
}

/// Whether `rate` asks for no shaping at all (a control: the machine's own elections).
pub fn unshaped(rate: &str) -> bool {
    rate == "off"
}

/// The node log line of a primary that stops serving (`node/tenure.rs`): deposed, or cut off
/// — no quorum answered within election-max (C10), no election needed —; either way it
/// closes the client connections it served.
const STEP_DOWN_LINE: &str = "no longer serving as primary";

/// The size of each node's log file now (0 without logs), to count the lines written after.
fn log_sizes(plan: &Plan<Links>, n: u32) -> Vec<u64> {
    (1..=n)
        .map(|id| {
            plan.log_dir
                .as_ref()
                .and_then(|d| std::fs::metadata(d.join(format!("node-{id}.log"))).ok())
                .map_or(0, |m| m.len())
        })
        .collect()
}

/// Lines containing `pat` that the node logs gained between `from` and `to` ([`log_sizes`]).
fn lines_between(plan: &Plan<Links>, from: &[u64], to: &[u64], pat: &str) -> usize {
    let Some(d) = &plan.log_dir else { return 0 };
    let mut n = 0;
    for (i, (&a, &b)) in from.iter().zip(to).enumerate() {
        let Ok(text) = std::fs::read(d.join(format!("node-{}.log", i + 1))) else {
            continue;
        };
        let part = text
            .get(a as usize..(b as usize).min(text.len()))
            .unwrap_or(&[]);
        n += String::from_utf8_lossy(part)
            .lines()
            .filter(|l| l.contains(pat))
            .count();
    }
    n
}

/// Bytes each node has sent so far on its peer link and on its client link: what the bridge
/// port of its veth pair received (root namespace, `/sys/class/net/PORT/statistics`).
fn uplinks(cluster: &NetCluster) -> Vec<[u64; 2]> {
    let rx = |port: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{port}/statistics/rx_bytes"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    cluster
        .nodes
        .iter()
        .map(|n| [rx(&n.peer_port), rx(&n.client_port)])
        .collect()
}

/// The busiest node's peer and client uplinks between two [`uplinks`] readings, in KB/s
/// over `secs`: `[peer, client]` (each the node that sent the most on it).
fn busiest(before: &[[u64; 2]], after: &[[u64; 2]], secs: f64) -> [f64; 2] {
    let mut best = [0.0f64; 2];
    for (a, b) in before.iter().zip(after) {
        for k in 0..2 {
            best[k] = best[k].max(b[k].saturating_sub(a[k]) as f64 / 1000.0 / secs);
        }
    }
    best
}

/// A fresh cluster with metrics on each node's loopback, settled, its table pre-filled, its
/// links shaped; and the highest term then.
fn setup(plan: &Plan<Links>, marks: &mut Marks) -> Result<(NetCluster, u64), String> {
    let mut args = plan.controller_args.clone();
    args.extend(["--metrics".to_string(), format!("127.0.0.1:{METRICS_PORT}")]);
    let bin = std::env::var("XCE_CONTROLLER").unwrap_or_default();
    marks.mark(&format!("round: starting a cluster ({bin})"));
    let cluster = NetCluster::start(3, &args, plan.log_dir.clone())
        .map_err(|e| format!("namespaces/cluster: {e}"))?;
    cluster
        .wait_settled(ROUND_BOUND)
        .ok_or("no primary that every node follows")?;
    prefill(&cluster, plan)?;
    if !unshaped(&plan.more.rate) {
        cluster
            .shape(&plan.more.rate, &plan.more.latency)
            .map_err(|e| format!("shaping: {e}"))?;
    }
    let term0 = max_term(&cluster).ok_or("no term before the calm stretch")?;
    marks.mark(&format!(
        "round: {} jobs pre-filled, links shaped ({} / {}), term {term0}; clients start",
        plan.more.jobs, plan.more.rate, plan.more.latency,
    ));
    Ok((cluster, term0))
}

/// Runs one round on a fresh cluster.
pub fn round(plan: &Plan<Links>) -> Result<RoundResult, String> {
    let mut marks = Marks::open(plan);
    let (mut cluster, term0) = setup(plan, &mut marks)?;
    let n = cluster.nodes.len() as u32;
    let (logs0, bytes0) = (log_sizes(plan, n), uplinks(&cluster));
    let origin = Instant::now();
    let crew = Crew::start(&cluster, plan, origin)?;
    std::thread::sleep(plan.more.calm_for.saturating_sub(origin.elapsed()));
    let t_fault = origin.elapsed();
    let term1 = max_term(&cluster);
    let (logs1, bytes1) = (log_sizes(plan, n), uplinks(&cluster));
    marks.mark(&format!("round: calm stretch over, term {term1:?}"));
    let during = fault(&mut cluster, plan, &crew, origin, &mut marks);
    let end = origin.elapsed();
    let term2 = max_term(&cluster);
    let campaigns = counts(&cluster);
    marks.mark(&format!("round: end, term {term2:?}; {campaigns}"));
    let records = crew.finish()?;
    let during = during?;
    let term1 = term1.ok_or("no term after the calm stretch")?;
    let faulted = plan.more.fault != FaultKind::None;
    let fault_elections = match faulted {
        true => Some(
            term2
                .ok_or("no term after the fault")?
                .max(during.unwrap_or(0))
                .saturating_sub(term1),
        ),
        false => None,
    };
    let mut r = tally(&records.calls, records.listings, t_fault, end, faulted);
    r.calm_elections = term1.saturating_sub(term0);
    r.fault_elections = fault_elections;
    r.calm_step_downs = lines_between(plan, &logs0, &logs1, STEP_DOWN_LINE);
    r.library = records.library;
    r.uplinks = busiest(&bytes0, &bytes1, t_fault.as_secs_f64());
    r.campaigns = campaigns;
    Ok(r)
}

/// A round's clients' records as a [`RoundResult`] (its elections left at 0 / `None`): the
/// calm stretch is `[0, t_fault]`, the fault's from `t_fault` to `end`.
fn tally(
    calls: &[Vec<Call>],
    listings: Vec<Vec<Listing>>,
    t_fault: Duration,
    end: Duration,
    faulted: bool,
) -> RoundResult {
    let mut r = RoundResult {
        calm_elections: 0,
        fault_elections: None,
        calm_writes: 0,
        calm_wait: Duration::ZERO,
        calm_call: Duration::ZERO,
        unavailable: Vec::new(),
        errors: 0,
        listings: Vec::new(),
        idle_listers: 0,
        calm_step_downs: 0,
        library: Library::default(),
        uplinks: [0.0; 2],
        campaigns: String::new(),
        quiet: None,
    };
    for w in calls {
        let ok: Vec<Duration> = w.iter().filter(|c| c.ok).map(|c| c.end).collect();
        r.calm_writes += ok.iter().filter(|&&t| t <= t_fault).count();
        r.calm_wait = r.calm_wait.max(longest_gap(&ok, Duration::ZERO, t_fault));
        let calm_calls = w.iter().filter(|c| c.end <= t_fault);
        r.calm_call = calm_calls.fold(r.calm_call, |m, c| m.max(c.end - c.start));
        if faulted {
            r.unavailable.push(longest_gap(&ok, t_fault, end));
        }
        r.errors += w.iter().filter(|c| !c.ok).count();
    }
    for l in listings {
        if !l.iter().any(|l| matches!(l.ending, Ending::Listed(_))) {
            r.idle_listers += 1;
        }
        r.listings.extend(l);
    }
    r
}

/// Listings of a set of rounds: completed, failed, cut by the round's end; the durations of
/// the completed ones.
pub(crate) fn listing_counts<'a>(
    ls: impl Iterator<Item = &'a Listing>,
) -> (usize, usize, usize, Vec<f64>) {
    let (mut failed, mut cut, mut secs) = (0, 0, Vec::new());
    for l in ls {
        match l.ending {
            Ending::Listed(_) => secs.push((l.end - l.start).as_secs_f64()),
            Ending::Failed(_) => failed += 1,
            Ending::Cut => cut += 1,
        }
    }
    (secs.len(), failed, cut, secs)
}

/// The longest time a listing cut by a round's end had been running, in seconds.
fn longest_cut<'a>(ls: impl Iterator<Item = &'a Listing>) -> f64 {
    ls.filter(|l| l.ending == Ending::Cut)
        .map(|l| (l.end - l.start).as_secs_f64())
        .fold(0.0, f64::max)
}

/// The table's note: what a round does.
fn setup_note(plan: &Plan<Links>) -> String {
    let m = &plan.more;
    let fault = match m.fault {
        FaultKind::None => "no fault".to_string(),
        FaultKind::Kill => "then the primary killed (kill -9, not restarted)".to_string(),
        FaultKind::Blackhole => format!(
            "then the primary blackholed for {:.0} s",
            plan.fault_for.as_secs_f64()
        ),
    };
    let links = match unshaped(&m.rate) {
        true => "no link shaped (a control)".to_string(),
        false => format!(
            "every link (clients' and peers') limited to {} both ways (tc tbf, queue {})",
            m.rate, m.latency,
        ),
    };
    let filled = match m.jobs {
        0 => String::new(),
        n => format!(
            "{n} jobs of {}-byte commands submitted before the shaping; ",
            m.command_bytes
        ),
    };
    let listers = match plan.readers {
        0 => "no listers".to_string(),
        n => format!(
            "{n} listers listing the whole table back to back (the library's pager, pages of {})",
            match m.page_bytes {
                0 => "the controller's size".to_string(),
                b => format!("at most {b} bytes"),
            }
        ),
    };
    format!(
        "3 controllers in network namespaces, {links}; {filled}{} writers submitting {}-byte \
         commands back to back and {listers}, each with a context of its own; per round: {:.0} \
         s of congestion alone from the clients' start, {fault}; a fresh cluster per round",
        plan.writers,
        m.command_bytes,
        m.calm_for.as_secs_f64(),
    )
}

/// The P14 table: one row per controller binary measured (`label`, rounds).
pub fn table(runs: &[(String, Vec<RoundResult>)], plan: &Plan<Links>) -> Table {
    let mut t = Table::new(
        "P14",
        "congested links: elections, writers' waits, listings",
    );
    t.note(setup_note(plan));
    t.note(
        "elections: raft term increments (every candidacy, won or not; terms read from each \
         node's metrics on its own loopback); longest wait: the longest time any writer went \
         without a success during congestion alone (median / max over rounds); longest call: \
         the longest single write that ended then; after the fault: a writer's longest time \
         without a success from the fault until every writer was served again (at most 30 s) \
         + 2 s; listings: completed / failed / cut by the round's end, the completed ones' \
         duration; step-downs: a primary that stopped serving during congestion alone, deposed \
         or cut off (no quorum answered within election-max, C10), closing its clients' \
         connections (node logs)",
    );
    t.columns(&[
        "controller",
        "rounds",
        "elections, congestion alone (total)",
        "primary step-downs (total)",
        "longest wait s: median",
        "max",
        "longest call s",
        "writes/s calm",
        "elections per fault: median",
        "max",
        "after the fault s: median",
        "max",
        "listings ok / failed / cut",
        "listing s: p50",
        "max",
        "failed writes",
    ]);
    let mut verdict = None;
    for (label, rs) in runs.iter().filter(|(_, rs)| !rs.is_empty()) {
        t.row(row(label, rs, plan));
        // The verdict is the last row's (the controller under test).
        verdict = Some(judge(label, rs, plan));
    }
    if let Some((ok, detail)) = verdict {
        t.target(target_text(plan), Verdict::from(ok, detail));
    }
    t
}

/// What [`judge`] holds a row to, in words.
fn target_text(plan: &Plan<Links>) -> String {
    let mut s = "0 elections from congestion alone, writers' longest wait ≤ 2 s".to_string();
    if plan.readers > 0 {
        s.push_str(", listings complete (none failed, every lister completes one per round)");
    }
    match plan.more.fault {
        FaultKind::None => {}
        FaultKind::Kill => s.push_str(", ≤ 1 election per kill"),
        FaultKind::Blackhole => {
            s.push_str(", ≤ 1 election per blackhole, unavailability after it ≤ 2 s")
        }
    }
    s
}

fn f_or_dash(s: Option<Summary>, f: impl Fn(Summary) -> f64) -> String {
    s.map_or("-".into(), |s| num(f(s)))
}

/// The cells of one controller binary's rounds.
fn row(label: &str, rs: &[RoundResult], plan: &Plan<Links>) -> Vec<String> {
    let waits: Vec<f64> = rs.iter().map(|r| r.calm_wait.as_secs_f64()).collect();
    let per_fault: Vec<f64> = rs
        .iter()
        .filter_map(|r| r.fault_elections)
        .map(|e| e as f64)
        .collect();
    let unavail: Vec<f64> = rs
        .iter()
        .flat_map(|r| r.unavailable.iter().map(|d| d.as_secs_f64()))
        .collect();
    let (ok, failed, cut, secs) = listing_counts(rs.iter().flat_map(|r| &r.listings));
    let (w, pf, un, ls) = (
        Summary::of(&waits),
        Summary::of(&per_fault),
        Summary::of(&unavail),
        Summary::of(&secs),
    );
    let call = rs
        .iter()
        .map(|r| r.calm_call.as_secs_f64())
        .fold(0.0, f64::max);
    let rate = rs.iter().map(|r| r.calm_writes).sum::<usize>() as f64
        / (rs.len() as f64 * plan.more.calm_for.as_secs_f64());
    vec![
        label.to_string(),
        rs.len().to_string(),
        rs.iter().map(|r| r.calm_elections).sum::<u64>().to_string(),
        rs.iter()
            .map(|r| r.calm_step_downs)
            .sum::<usize>()
            .to_string(),
        f_or_dash(w, |s| s.p50),
        f_or_dash(w, |s| s.max),
        num(call),
        num(rate),
        f_or_dash(pf, |s| s.p50),
        f_or_dash(pf, |s| s.max),
        f_or_dash(un, |s| s.p50),
        f_or_dash(un, |s| s.max),
        format!("{ok} / {failed} / {cut}"),
        f_or_dash(ls, |s| s.p50),
        f_or_dash(ls, |s| s.max),
        rs.iter().map(|r| r.errors).sum::<usize>().to_string(),
    ]
}

/// One controller binary's verdict against [`target_text`], and by how much.
pub(crate) fn judge(label: &str, rs: &[RoundResult], plan: &Plan<Links>) -> (bool, String) {
    let calm: u64 = rs.iter().map(|r| r.calm_elections).sum();
    let wait = rs
        .iter()
        .map(|r| r.calm_wait.as_secs_f64())
        .fold(0.0, f64::max);
    let (_, failed, _, _) = listing_counts(rs.iter().flat_map(|r| &r.listings));
    let idle: usize = rs.iter().map(|r| r.idle_listers).sum();
    let mut ok = calm == 0 && wait <= 2.0;
    let mut detail = format!(
        "{label}: {calm} elections under congestion alone, longest wait {} s",
        num(wait)
    );
    if plan.readers > 0 {
        ok &= failed == 0 && idle == 0;
        let cut = longest_cut(rs.iter().flat_map(|r| &r.listings));
        detail.push_str(&format!(
            ", {failed} listings failed, {idle} lister-rounds without a complete listing (the \
             longest listing cut by a round's end had run {} s)",
            num(cut)
        ));
    }
    if plan.more.fault != FaultKind::None {
        let pf = rs
            .iter()
            .filter_map(|r| r.fault_elections)
            .max()
            .unwrap_or(u64::MAX);
        ok &= pf <= 1;
        detail.push_str(&format!(", at most {pf} elections per fault"));
    }
    if plan.more.fault == FaultKind::Blackhole {
        let un = rs
            .iter()
            .flat_map(|r| r.unavailable.iter().map(|d| d.as_secs_f64()))
            .fold(0.0, f64::max);
        ok &= un <= 2.0;
        detail.push_str(&format!(", unavailability at most {} s", num(un)));
    }
    (ok, detail)
}

/// The command's name (its binary).
pub const TOOL: &str = "xce-congestion";

/// The log line of one round.
fn round_line(label: &str, n: usize, r: &RoundResult) -> String {
    let (ok, failed, cut, secs) = listing_counts(r.listings.iter());
    let restarts: u32 = r.listings.iter().map(|l| l.restarts).sum();
    let first_err = r.listings.iter().find_map(|l| match &l.ending {
        Ending::Failed(e) => Some(e.as_str()),
        _ => None,
    });
    format!(
        "  {label} round {n}: {} elections calm (longest wait {:.2} s, longest call {:.2} s, \
         {} writes, {} step-downs), {} for the fault (unavailable max {:.2} s), {} failed \
         writes; listings {ok} ok / {failed} failed / {cut} cut, max {:.2} s, cut after up to \
         {:.2} s, {restarts} restarts{}; library retries / rotations: writers {} / {}, listers {} / {}; busiest \
         uplinks, calm: peer {:.0} KB/s, client {:.0} KB/s; {}",
        r.calm_elections,
        r.calm_wait.as_secs_f64(),
        r.calm_call.as_secs_f64(),
        r.calm_writes,
        r.calm_step_downs,
        r.fault_elections.map_or("-".into(), |e| e.to_string()),
        r.unavailable
            .iter()
            .max()
            .unwrap_or(&Duration::ZERO)
            .as_secs_f64(),
        r.errors,
        secs.iter().copied().fold(0.0, f64::max),
        longest_cut(r.listings.iter()),
        first_err.map_or(String::new(), |e| format!(" (first failure: {e})")),
        r.library.retries[0],
        r.library.rotations[0],
        r.library.retries[1],
        r.library.rotations[1],
        r.uplinks[0],
        r.uplinks[1],
        r.campaigns,
    )
}

/// Per row (a build), its label and its rounds.
pub type Runs = Vec<(String, Vec<RoundResult>)>;

/// `xce-congestion`: rounds of this build (and of `--before`'s binary, round for round) on
/// `plan` (see [`plan`] for the defaults); the P14 table.
pub fn command(args: &Common, plan: Plan<Links>) -> ExitCode {
    match run(args, plan) {
        Ok(_) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// The rounds of [`command`], P14's table printed; the plan they ran and their results (for
/// P16's table, `p16_adaptation`, when `plan.more.quiet_kills` asked for quiet kills too).
pub fn run(args: &Common, plan: Plan<Links>) -> Result<(Plan<Links>, Runs), ExitCode> {
    let logs = log_dir(TOOL);
    let plan = Plan {
        log_dir: Some(logs.clone()),
        controller_args: args.controller_args.clone(),
        ..plan
    };
    let mut bins = Vec::new();
    if let Some(b) = &args.before {
        bins.push(("before", b.clone()));
    }
    bins.push(("this build", crate::controller_bin()));
    let rows: Vec<Row<()>> = bins
        .into_iter()
        .map(|(label, bin)| Row {
            label: label.to_string(),
            bin,
            with: (),
        })
        .collect();
    sides::banner(TOOL, args.rounds, &rows, &logs);
    let started = Instant::now();
    let runs = sides::alternate(TOOL, &rows, args.rounds, &logs, |row, n| {
        // P16: the same build on quiet links first, then congested.
        let quiet =
            (plan.more.quiet_kills > 0).then(|| Quiet::measure(plan.more.quiet_kills, &logs));
        let mut r = round(&plan)?;
        r.quiet = quiet;
        eprintln!("{}", round_line(&row.label, n, &r));
        Ok(r)
    })?;
    println!("{}", table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    Ok((plan, runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn gaps_count_from_the_start_and_to_the_end() {
        let ok = [s(100), s(300), s(1300)];
        assert_eq!(longest_gap(&ok, s(0), s(1500)), s(1000));
        assert_eq!(longest_gap(&ok, s(0), s(4000)), s(2700));
        assert_eq!(longest_gap(&[], s(1000), s(1500)), s(500));
    }

    #[test]
    fn tally_splits_calm_and_fault() {
        let call = |a, b, ok| Call {
            start: s(a),
            end: s(b),
            ok,
        };
        let calls = vec![vec![
            call(0, 400, true),
            call(400, 900, false),
            call(900, 1000, true),
            call(1000, 2500, true),
            call(2500, 2600, true),
        ]];
        let listing = |a, b, ending| Listing {
            start: s(a),
            end: s(b),
            ending,
            restarts: 0,
        };
        let listings = vec![
            vec![
                listing(0, 700, Ending::Listed(10)),
                listing(700, 2600, Ending::Cut),
            ],
            vec![listing(0, 900, Ending::Failed("x".into()))],
        ];
        let r = tally(&calls, listings, s(2000), s(2600), true);
        assert_eq!((r.calm_writes, r.errors, r.idle_listers), (2, 1, 1));
        assert_eq!(r.calm_wait, s(1000));
        assert_eq!(r.calm_call, s(500));
        assert_eq!(r.unavailable, vec![s(500)]);
        let (ok, failed, cut, secs) = listing_counts(r.listings.iter());
        assert_eq!((ok, failed, cut, secs), (1, 1, 1, vec![0.7]));
        assert_eq!(longest_cut(r.listings.iter()), 1.9);
    }

    #[test]
    fn series_and_faults_parse() {
        let m = "# TYPE xce_raft_term gauge\nxce_raft_term 7\nxce_is_primary 1\n";
        assert_eq!(series(m, "xce_raft_term"), Some(7.0));
        assert_eq!(series(m, "xce_is_primary"), Some(1.0));
        assert_eq!(series(m, "xce_raft"), None);
        assert_eq!(FaultKind::parse("kill"), Some(FaultKind::Kill));
        assert_eq!(FaultKind::parse("none"), Some(FaultKind::None));
        assert_eq!(FaultKind::parse("blackhole"), Some(FaultKind::Blackhole));
        assert_eq!(FaultKind::parse("pause"), None);
    }
}
