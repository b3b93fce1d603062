//! S18's load: 8 client threads in the client namespace, through the library
//! ([`xce::client::Client`]): the first four with a context each, the other four sharing one
//! (F11: calls of one context in arrival order). Each writes fresh job ids (`jobsubmit`) and
//! lists (`joblist`), its mix and pace drawn from the run's seed, and records every call.
//!
//! The job table is checked as many small sets instead of one that grows all run long:
//! writes go to the current *key* (the job's user, `nemesis-K`, K = seconds since the start
//! / [`KEY_SPAN`]), and a listing reads one key (the current one mostly, an older one
//! sometimes: old writes must survive every later failover). Linearizability is local
//! (Herlihy & Wing): the history is linearizable if each key's is, so each is checked alone
//! and a 30-minute run never holds hundreds of thousands of ids per read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::{new_job_id, parse_masters, Client, Config};
use xce::Error;
use xce_proto::wire::{Job, JobFilter, JobSpec};

use crate::harness::netns::{self, NetCluster};
use crate::rng::Rng;

/// Client threads.
pub const THREADS: usize = 8;
/// Threads `0..OWN_CONTEXTS` have a context each; the others share one.
pub const OWN_CONTEXTS: usize = 4;
/// How long one key is written.
pub const KEY_SPAN: Duration = Duration::from_secs(10);
/// Writes among a thread's calls, %.
const WRITE_PERCENT: u64 = 70;
/// Listings of an older key among the listings, %.
const OLD_KEY_PERCENT: u64 = 20;

/// The user (the key) of the jobs written during `key`.
pub fn key_user(key: u32) -> String {
    format!("nemesis-{key}")
}

/// The key of a job's user, if it is one of ours.
pub fn user_key(user: &str) -> Option<u32> {
    user.strip_prefix("nemesis-")?.parse().ok()
}

/// One call, times from the run's origin.
#[derive(Debug, Clone)]
pub struct Call {
    pub thread: usize,
    pub key: u32,
    pub invoked: Duration,
    pub completed: Duration,
    pub op: CallOp,
}

#[derive(Debug, Clone)]
pub enum CallOp {
    /// `jobsubmit` of `id`; an error: outcome unknown.
    Write { id: u64, result: Result<(), Error> },
    /// `joblist` of one key: the ids listed.
    Read { result: Result<Vec<u64>, Error> },
}

impl Call {
    pub fn ok(&self) -> bool {
        match &self.op {
            CallOp::Write { result, .. } => result.is_ok(),
            CallOp::Read { result } => result.is_ok(),
        }
    }
}

/// A context over the cluster's masters, made in the calling thread's namespace.
pub fn context(masters: &str, name: &str) -> Result<Client, Error> {
    let mut cfg = Config::new(parse_masters(masters)?);
    cfg.client_name = name.into();
    Client::start(cfg)
}

fn spec(id: u64, key: u32) -> JobSpec {
    JobSpec {
        job_id: id,
        name: "nemesis".into(),
        user: key_user(key),
        queue: String::new(),
        command: "true".into(),
        ncpus: 1,
        mem_mb: 1,
    }
}

/// The ids of `jobs`. (A job of another user in a listing filtered by user shows in the
/// check: its id was not written under this key.)
fn ids_of(jobs: Vec<Job>) -> Vec<u64> {
    jobs.into_iter().map(|j| j.job_id).collect()
}

/// The running threads.
pub struct Clients {
    stop: Arc<AtomicBool>,
    /// Per thread: when its last call succeeded (ns from the origin).
    last_ok: Vec<Arc<AtomicU64>>,
    handles: Vec<JoinHandle<Result<Vec<Call>, String>>>,
}

impl Clients {
    /// Starts [`THREADS`] threads in the cluster's client namespace.
    pub fn start(cluster: &NetCluster, seed: u64, origin: Instant) -> Result<Clients, String> {
        let masters = cluster.masters();
        let ns = cluster.client_ns.clone();
        let shared = {
            let m = masters.clone();
            netns::in_ns(&ns, move || context(&m, "nemesis-shared"))
                .map_err(|e| format!("client namespace: {e}"))?
                .map_err(|e| format!("shared context: {e}"))?
        };
        let stop = Arc::new(AtomicBool::new(false));
        let last_ok: Vec<Arc<AtomicU64>> = (0..THREADS).map(|_| Arc::default()).collect();
        let handles = (0..THREADS)
            .map(|i| {
                let ctx = (i >= OWN_CONTEXTS).then(|| shared.clone());
                let t = Thread {
                    i,
                    ns: ns.clone(),
                    masters: masters.clone(),
                    rng: Rng::fork(seed, 1000 + i as u64),
                    origin,
                    stop: stop.clone(),
                    last_ok: last_ok[i].clone(),
                };
                std::thread::spawn(move || t.run(ctx))
            })
            .collect();
        Ok(Clients {
            stop,
            last_ok,
            handles,
        })
    }

    /// Whether every thread succeeded after `t` (from the origin).
    pub fn all_served_after(&self, t: Duration) -> bool {
        self.last_ok
            .iter()
            .all(|l| Duration::from_nanos(l.load(Ordering::Relaxed)) > t)
    }

    /// The threads not served after `t`.
    pub fn not_served_after(&self, t: Duration) -> Vec<usize> {
        (0..THREADS)
            .filter(|&i| Duration::from_nanos(self.last_ok[i].load(Ordering::Relaxed)) <= t)
            .collect()
    }

    /// Stops every thread (each ends its call in progress) and returns every call.
    pub fn stop(self) -> Result<Vec<Call>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for h in self.handles {
            all.extend(h.join().map_err(|_| "a client thread panicked")??);
        }
        Ok(all)
    }
}

/// One client thread's state.
struct Thread {
    i: usize,
    ns: String,
    masters: String,
    rng: Rng,
    origin: Instant,
    stop: Arc<AtomicBool>,
    last_ok: Arc<AtomicU64>,
}

impl Thread {
    /// Enters the namespace and calls until stopped, through `shared` or a context of its own.
    fn run(mut self, shared: Option<Client>) -> Result<Vec<Call>, String> {
        netns::enter(&self.ns).map_err(|e| format!("enter {}: {e}", self.ns))?;
        let client = match shared {
            Some(c) => c,
            None => context(&self.masters, &format!("nemesis-{}", self.i))
                .map_err(|e| format!("context of thread {}: {e}", self.i))?,
        };
        let mut calls = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let call = self.one(&client);
            if call.ok() {
                self.last_ok
                    .store(call.completed.as_nanos() as u64, Ordering::Relaxed);
            }
            calls.push(call);
            std::thread::sleep(self.rng.ms(5, 30));
        }
        Ok(calls)
    }

    fn one(&mut self, client: &Client) -> Call {
        let invoked = self.origin.elapsed();
        let now_key = (invoked.as_secs() / KEY_SPAN.as_secs()) as u32;
        let (key, op) = if self.rng.percent(WRITE_PERCENT) {
            let id = new_job_id();
            let result = client.jobsubmit(spec(id, now_key)).map(drop);
            (now_key, CallOp::Write { id, result })
        } else {
            let key = if now_key > 0 && self.rng.percent(OLD_KEY_PERCENT) {
                self.rng.below(now_key as u64) as u32
            } else {
                now_key
            };
            let filter = JobFilter {
                user: key_user(key),
                ..JobFilter::default()
            };
            let result = client.joblist(filter).map(ids_of);
            (key, CallOp::Read { result })
        };
        Call {
            thread: self.i,
            key,
            invoked,
            completed: self.origin.elapsed(),
            op,
        }
    }
}

/// Every job the cluster lists, through a fresh context in the client namespace (after
/// every thread stopped): the run's last read, and when it was made.
pub fn final_listing(
    cluster: &NetCluster,
    origin: Instant,
) -> Result<(Vec<Job>, Duration, Duration), String> {
    let masters = cluster.masters();
    netns::in_ns(&cluster.client_ns, move || {
        let c = context(&masters, "nemesis-final")?;
        let invoked = origin.elapsed();
        let jobs = c.joblist(JobFilter::default())?;
        Ok::<_, Error>((jobs, invoked, origin.elapsed()))
    })
    .map_err(|e| format!("final listing: {e}"))?
    .map_err(|e| format!("final listing: {e}"))
}
