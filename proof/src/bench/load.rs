//! P11 (write throughput) and P12 (scale of the job table): measurements against real
//! `xce-controller` processes, used by the `xce-scale` command (proof/BENCH.md).
//!
//! Everything here measures; nothing asserts a speed. Each helper returns numbers and the
//! command prints them as tables.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use xce::client::Client;
use xce_proto::wire::JobSpec;

use super::steady::lib_client;
use crate::{Cluster, ClusterOpts};

/// A job of "typical size": short names and a one-line command, as a site's jobs have.
pub fn typical_job(job_id: u64) -> JobSpec {
    JobSpec {
        job_id,
        name: format!("job-{}", job_id % 1_000_000),
        user: format!("user{}", job_id % 50),
        queue: String::new(),
        command: format!(
            "/opt/app/bin/run --input /data/in/{} --threads 4",
            job_id % 100_000
        ),
        ncpus: 4,
        mem_mb: 2048,
    }
}

/// What a throughput run measured.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub contexts: usize,
    pub acked: u64,
    pub failed: u64,
    pub secs: f64,
}

impl Rate {
    pub fn per_sec(&self) -> f64 {
        self.acked as f64 / self.secs
    }
}

/// Job ids unique across every run of this process: the bench's own counter in the low bits,
/// the process id above it.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub fn next_job_id() -> u64 {
    ((std::process::id() as u64) << 40) | NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// `contexts` threads, one client context each, submit as fast as they can for `dur` (after
/// each has made one call, so connect time is not counted). Every acknowledged submit is
/// committed on a quorum (fsynced) before its reply.
pub fn submit_rate(masters: &str, contexts: usize, dur: Duration) -> Result<Rate, String> {
    let clients: Vec<Client> = (0..contexts)
        .map(|_| lib_client(masters))
        .collect::<Result<_, _>>()?;
    submit_rate_with(clients, dur)
}

/// [`submit_rate`] with contexts made by the caller (P15: with TLS and an identity).
pub fn submit_rate_with(clients: Vec<Client>, dur: Duration) -> Result<Rate, String> {
    let contexts = clients.len();
    for c in &clients {
        c.hello().map_err(|e| format!("hello: {e}"))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(contexts + 1));
    let mut handles = Vec::new();
    for c in clients {
        let (stop, acked, failed, start) =
            (stop.clone(), acked.clone(), failed.clone(), start.clone());
        handles.push(
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        match c.jobsubmit(typical_job(next_job_id())) {
                            Ok(_) => acked.fetch_add(1, Ordering::Relaxed),
                            Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
                .map_err(|e| format!("spawn: {e}"))?,
        );
    }
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    // Calls in flight when the clock stops still count: the time runs until they end.
    for h in handles {
        let _ = h.join();
    }
    Ok(Rate {
        contexts,
        acked: acked.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        secs: t0.elapsed().as_secs_f64(),
    })
}

/// A small job (P12's one-context rows): a short name, a short user, `true` as the command —
/// the smallest a site submits, where the log's cost per entry weighs most against the state's.
pub fn small_job(job_id: u64) -> JobSpec {
    JobSpec {
        job_id,
        name: format!("j{}", job_id % 1000),
        user: "alice".into(),
        queue: String::new(),
        command: "true".into(),
        ncpus: 1,
        mem_mb: 64,
    }
}

/// Submits `n` typical jobs with `contexts` parallel contexts; returns how long it took.
pub fn load_jobs(masters: &str, n: u64, contexts: usize) -> Result<Duration, String> {
    load_jobs_timed(masters, n, contexts).map(|l| l.took)
}

/// One acknowledged write: when it was sent (wall clock, ms since the Unix epoch, as the
/// controllers stamp their log lines) and how long it took (µs).
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub sent_ms: i64,
    pub took_us: u32,
}

impl Timed {
    /// The interval the write was in flight, in wall-clock ms.
    pub fn span_ms(&self) -> (i64, i64) {
        (
            self.sent_ms,
            self.sent_ms + (i64::from(self.took_us) + 999) / 1000,
        )
    }
}

/// A load and every write of it.
pub struct Loaded {
    pub took: Duration,
    pub writes: Vec<Timed>,
}

/// The wall clock in ms since the Unix epoch.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// [`load_jobs`], keeping when each write was sent and how long it took.
pub fn load_jobs_timed(masters: &str, n: u64, contexts: usize) -> Result<Loaded, String> {
    let clients: Vec<Client> = (0..contexts)
        .map(|_| lib_client(masters))
        .collect::<Result<_, _>>()?;
    let left = Arc::new(AtomicU64::new(n));
    let err = Arc::new(std::sync::Mutex::new(None::<String>));
    let t0 = Instant::now();
    let writes = std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .iter()
            .map(|c| {
                let (left, err) = (left.clone(), err.clone());
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
                        .is_ok()
                    {
                        let (sent_ms, t) = (wall_ms(), Instant::now());
                        match c.jobsubmit(typical_job(next_job_id())) {
                            Ok(_) => mine.push(Timed {
                                sent_ms,
                                took_us: t.elapsed().as_micros().min(u32::MAX as u128) as u32,
                            }),
                            Err(e) => {
                                *err.lock().unwrap() = Some(format!("jobsubmit: {e}"));
                                left.store(0, Ordering::Relaxed);
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let took = t0.elapsed();
    let e = err.lock().unwrap().take();
    match e {
        Some(e) => Err(e),
        None => Ok(Loaded { took, writes }),
    }
}

/// `n` jobs made by `job` submitted one at a time through one context (one write per Raft
/// entry: nothing to batch them with); returns how long it took.
pub fn submit_one_by_one(
    masters: &str,
    n: u64,
    job: fn(u64) -> JobSpec,
) -> Result<Duration, String> {
    let c = lib_client(masters)?;
    let t0 = Instant::now();
    for _ in 0..n {
        c.jobsubmit(job(next_job_id()))
            .map_err(|e| format!("jobsubmit: {e}"))?;
    }
    Ok(t0.elapsed())
}

/// Resident set size of a process, in bytes (`VmRSS` of /proc/PID/status).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// What a node's data directory holds on disk (st_blocks): its snapshot file
/// (`snapshot.bin`) and everything else but a snapshot on its way (`snapshot.*.tmp`) — the log
/// store (the log, the vote, the Raft metadata; C24: its size follows the unpurged log) and
/// small markers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Split {
    pub snapshot: u64,
    pub log_store: u64,
}

pub fn split(dir: &Path) -> Split {
    use std::os::unix::fs::MetadataExt;
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.blocks() * 512);
    let snapshot = size(&dir.join("snapshot.bin"));
    // A snapshot being written or received (`snapshot.*.tmp`) is neither.
    let passing: u64 = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("snapshot.") && n.ends_with(".tmp")
                })
                .map(|e| size(&e.path()))
                .sum()
        })
        .unwrap_or(0);
    Split {
        snapshot,
        log_store: disk_bytes(dir).saturating_sub(snapshot + passing),
    }
}

/// Bytes allocated on disk under `dir` (st_blocks, so sparse files count as what they use).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let Ok(md) = e.metadata() else { continue };
        if md.is_dir() {
            total += disk_bytes(&e.path());
        } else {
            total += md.blocks() * 512;
        }
    }
    total
}

/// What one listing through the C API returned.
#[derive(Debug, Clone)]
pub struct CListing {
    /// The count, or the negative status `xcecli_joblist` returned.
    pub rc: i64,
    /// The job ids, in the order returned.
    pub ids: Vec<u64>,
    /// Time of the listing call alone.
    pub took: Duration,
    /// F17 counters of the context after the call: (rotations, failovers).
    pub rotations: u64,
    pub failovers: u64,
}

/// `xcecli_joblist` of everything through the old caller's C signature (start, list, free,
/// stop), as a C program makes these calls.
pub fn c_joblist_ids(masters: &str) -> Result<CListing, String> {
    use xce::ffi::config::*;
    use xce::ffi::ops::*;
    use xce::ffi::types::*;
    let masters = CString::new(masters).map_err(|e| e.to_string())?;
    let mut conf = std::mem::MaybeUninit::<xce_client_config_t>::zeroed();
    xce_client_config_init(conf.as_mut_ptr());
    let rc = xce_client_config_parse_masters(conf.as_mut_ptr(), masters.as_ptr());
    if rc < 0 {
        return Err(format!("parse masters: {rc}"));
    }
    let mut ctx = std::ptr::null_mut();
    let rc = xcecli_start(conf.as_ptr(), &mut ctx);
    if rc < 0 {
        return Err(format!("xcecli_start: {}", xce::strerror(rc)));
    }
    // The old callers' signature: an array of job pointers, NULL-terminated.
    let mut jobs: *mut *mut xce_job_t = std::ptr::null_mut();
    let t0 = Instant::now();
    let n = xcecli_joblist(ctx, &mut jobs);
    let took = t0.elapsed();
    let mut ids = Vec::new();
    if n >= 0 {
        // SAFETY: xcecli_joblist returned an array of n job pointers at `jobs`.
        let arr = unsafe { std::slice::from_raw_parts(jobs, n as usize) };
        // SAFETY: each entry points to a job of that array.
        ids = arr.iter().map(|&j| unsafe { (*j).jobid }).collect();
        xce_free_joblist(jobs);
    }
    let mut st = std::mem::MaybeUninit::<xce::ffi::hooks::xce_stats_t>::zeroed();
    let (rotations, failovers) = if xce::ffi::hooks::xcecli_get_stats(ctx, st.as_mut_ptr()) == 0 {
        // SAFETY: filled by xcecli_get_stats on success.
        let st = unsafe { st.assume_init() };
        (st.rotations, st.failovers)
    } else {
        (0, 0)
    };
    xcecli_stop(ctx);
    Ok(CListing {
        rc: n as i64,
        ids,
        took,
        rotations,
        failovers,
    })
}

/// The data directory of node `id` of a [`Cluster`].
pub fn node_dir(c: &Cluster, id: u32) -> std::path::PathBuf {
    c.data(id)
}

/// A 3-node cluster of controller binary `bin` (it sets `XCE_CONTROLLER`) with an elected
/// primary, logs in `logs`.
pub fn cluster_of(bin: &Path, logs: &Path) -> Result<Cluster, String> {
    cluster_with(bin, logs, &[])
}

/// [`cluster_of`] with more `run` flags.
pub fn cluster_with(bin: &Path, logs: &Path, extra: &[&str]) -> Result<Cluster, String> {
    std::env::set_var("XCE_CONTROLLER", bin);
    let c = Cluster::start(
        3,
        ClusterOpts {
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            log_dir: Some(logs.to_path_buf()),
            ..Default::default()
        },
    )
    .map_err(|e| format!("start: {e}"))?;
    c.wait_primary(Duration::from_secs(30))
        .ok_or("no primary")?;
    Ok(c)
}
