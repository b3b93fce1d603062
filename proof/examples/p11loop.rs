//! P11's single context only, for profiling (BENCH.md): `p11loop <seconds>`. Starts a plain
//! 3-node cluster as `xce-scale --only P11` does, prints the primary's and the standbys' pids
//! (for `perf record -p` / `strace -p`), then submits back to back from one context and prints
//! the rate, the round trip's p50/p90/p99 and the CPU time of the three controllers per
//! submit. `P11_DELAY_MS` waits before the submits
//! (time to attach a tool).
use std::time::Duration;

use xce_proof::bench::load::{next_job_id, one_context, typical_job};
use xce_proof::bench::stats::Summary;
use xce_proof::bench::steady::lib_client;
use xce_proof::{Cluster, ClusterOpts};

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut c = Cluster::start(
        3,
        ClusterOpts {
            extra_args: vec![],
            log_dir: None,
            ..Default::default()
        },
    )
    .unwrap();
    let primary = c.wait_primary(Duration::from_secs(30)).unwrap();
    let cl = lib_client(&c.masters()).unwrap();
    for n in &c.nodes {
        eprintln!(
            "{} pid {}",
            if n.id == primary {
                "primary"
            } else {
                "standby"
            },
            n.pid().unwrap()
        );
    }
    std::thread::sleep(Duration::from_millis(
        std::env::var("P11_DELAY_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    ));
    let pids: Vec<u32> = c.nodes.iter().filter_map(|n| n.pid()).collect();
    let cpu0: f64 = pids
        .iter()
        .map(|&p| xce_proof::harness::sys::process_cpu_us(p))
        .sum();
    let (v, rate) = one_context(&cl, Duration::from_secs(secs), |c| {
        c.jobsubmit(typical_job(next_job_id()))
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .unwrap();
    let cpu = pids
        .iter()
        .map(|&p| xce_proof::harness::sys::process_cpu_us(p))
        .sum::<f64>()
        - cpu0;
    let s = Summary::of(&v).unwrap();
    println!(
        "submits {} rate {rate:.0}/s p50 {:.0} µs p90 {:.0} p99 {:.0}; controllers' CPU {:.1} µs/submit",
        s.n,
        s.p50,
        s.p90,
        s.p99,
        cpu / s.n as f64
    );
    c.kill_all();
}
