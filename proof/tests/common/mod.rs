//! Shared pieces of the scenario tests: a cluster with an elected primary, clients with
//! given budgets, and job bookkeeping.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xce::client::RetryConfig;
use xce::client::{parse_masters, Client, Config, Endpoint};
use xce_proof::harness::netns::NetCluster;
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::wire::{JobFilter, JobSpec, Join, Notify, NotifyKind, SessionRole};
#[allow(unused_imports)] // each test binary uses a different subset
pub use xce_testkit::cluster::tls_flags;

/// How long any scenario waits for an election before failing (generous: 2 loaded cores).
pub const ELECTION_WAIT: Duration = Duration::from_secs(15);

/// Long versions (hundreds of kill trials) run when XCE_LONG is set.
pub fn long() -> bool {
    std::env::var_os("XCE_LONG").is_some_and(|v| v != "0")
}

/// A started cluster of `n` nodes with an elected primary.
pub fn cluster(n: usize) -> (Cluster, u32) {
    cluster_with(n, ClusterOpts::default())
}

pub fn cluster_with(n: usize, opts: ClusterOpts) -> (Cluster, u32) {
    let c = Cluster::start(n, opts).expect("start cluster");
    // Settled, not only a primary: a node still catching up does not vote (C12), and a
    // scenario that stops the primary next would find no quorum.
    let p = c
        .wait_settled(ELECTION_WAIT)
        .expect("no primary followed by every node");
    (c, p)
}

/// A client over the cluster's masters with the default budget.
pub fn client(c: &Cluster) -> Client {
    client_for(&c.masters())
}

pub fn client_for(masters: &str) -> Client {
    Client::start(scenario_config(masters)).expect("client start")
}

/// [`client`] with these options (the default retry budget).
pub fn client_with(c: &Cluster, options: xce::client::Options) -> Client {
    Client::start_with(
        scenario_config(&c.masters()),
        options,
        xce::client::XCE_RETRY_DEFAULTS,
    )
    .expect("client start")
}

fn scenario_config(masters: &str) -> Config {
    let mut cfg = Config::new(parse_masters(masters).expect("masters"));
    cfg.client_name = "scenario".into();
    cfg
}

/// A budget far shorter than an election: 2 sleeps of 10–20 ms.
pub fn short_budget() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        initial_retry_ms: 10,
        max_retry_ms: 20,
        backoff_multiplier: 2.0,
    }
}

pub fn spec(name: &str) -> JobSpec {
    JobSpec {
        job_id: xce::client::new_job_id(),
        name: name.into(),
        user: "alice".into(),
        queue: String::new(),
        command: "sleep 1".into(),
        ncpus: 1,
        mem_mb: 64,
    }
}

/// A small job (`true`, one CPU, 1 MiB) of `user`, named `name`, with a fresh id.
pub fn user_spec(user: &str, name: &str) -> JobSpec {
    JobSpec {
        job_id: xce::client::new_job_id(),
        name: name.into(),
        user: user.into(),
        queue: String::new(),
        command: "true".into(),
        ncpus: 1,
        mem_mb: 1,
    }
}

/// Every job id the cluster lists, with duplicates kept (so a test can count them).
pub fn all_job_ids(cl: &Client) -> Vec<u64> {
    cl.joblist(JobFilter::default())
        .expect("joblist")
        .into_iter()
        .map(|j| j.job_id)
        .collect()
}

/// `xce-controller pki ARGS…`, which must succeed: what it printed, trimmed.
pub fn pki(args: &[&str]) -> String {
    let out = std::process::Command::new(xce_proof::controller_bin())
        .arg("pki")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "pki {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A worker's (or scheduler's) session on `host`.
pub fn join_as(role: SessionRole, host: &str) -> Join {
    Join {
        role,
        host: host.into(),
        ncpus: 1024,
        mem_mb: 1 << 20,
        attrs: vec![],
    }
}

/// The job finished with `exit_code` (a worker's notification, accepted into the outbox).
pub fn finish(w: &Client, id: u64, exit_code: i32) {
    w.notify(Notify {
        kind: NotifyKind::JobFinish,
        job_id: id,
        exit_code,
    })
    .expect("notify accepted");
}

/// Now, in ms since the epoch (the clock a heartbeat's `last_heartbeat` is in).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `cl` joins as `j` again after each reconnect, before the interrupted call is re-sent (a
/// daemon's reconnect handler, F17); how many times it ran.
pub fn rejoin_on_reconnect(cl: &Client, j: Join) -> Arc<AtomicU64> {
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    cl.set_reconnect_handler(Some(Arc::new(move |c: &Client| {
        r.fetch_add(1, Ordering::SeqCst);
        match c.join(j.clone()) {
            Ok(_) => 0,
            Err(e) => e.status(),
        }
    })));
    runs
}

/// The library's endpoint for a socket address.
pub fn ep(a: SocketAddr) -> Endpoint {
    Endpoint::new(a.ip().to_string(), a.port())
}

/// Slower timing than the defaults (lease 600 ms, election timeout 300–600 ms), so that a
/// debug build on a loaded machine does not miss a lease by accident: the namespaced tests'
/// properties hold for any timing, and their faults are waited for, not slept through.
pub const SLOW_TIMING: [&str; 6] = [
    "--heartbeat-ms",
    "50",
    "--election-min-ms",
    "300",
    "--election-max-ms",
    "600",
];

/// Waits (at most `bound`) until every node of `c` logged that it votes (a node that started
/// blank votes only once it has caught up with the leader, C12), so that the cluster can lose
/// any one node; `why` is what the nodes logged, for the failure.
pub fn wait_all_vote(c: &NetCluster, bound: Duration, why: impl Fn() -> String) {
    let t0 = std::time::Instant::now();
    loop {
        let log = c.log_lines(&["votes and campaigns again (C12)"]);
        if c.nodes
            .iter()
            .all(|n| log.contains(&format!("node {}: ", n.id)))
        {
            return;
        }
        assert!(
            t0.elapsed() < bound,
            "not every node caught up within {} s:\n{}",
            bound.as_secs(),
            why()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a final listing says of the acknowledged writes: those it lacks, and the ids it lists
/// more than once.
pub fn lost_and_twice(acked: &[u64], listed: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut count: std::collections::BTreeMap<u64, usize> = Default::default();
    for &id in listed {
        *count.entry(id).or_default() += 1;
    }
    let lost = acked.iter().copied().filter(|id| !count.contains_key(id));
    let twice = count.iter().filter(|(_, &n)| n > 1).map(|(&id, _)| id);
    (lost.collect(), twice.collect())
}
